"""`reverser lag`: the consumer-lag table (or JSON) for the configured log, once or refreshed.

One shot takes a single sample: lag in seconds is shown only where a partition is caught up (0)
and is `-` (JSON null) elsewhere, because one log-end observation cannot place an offset in time;
nothing is persisted between runs. `--watch` keeps the monitor's history, so lag seconds and the
window-based statuses fill in from the second refresh. Exit code 1 when a selected group is ERR
or over its lag-seconds threshold. `--serve ADDR` runs the monitor until interrupted and serves
Burrow's HTTP API, `/metrics` and `/healthz` on ADDR, for clusters that run no `reverser run`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from pipeline.commandline import add_bootstrap_argument, add_config_argument, settings_from_args
from pipeline.config import Settings, split_host_port
from pipeline.exitcodes import CommandError, ExitCode, usage_error
from pipeline.lag.burrow import burrow_routes
from pipeline.lag.component import LagComponent
from pipeline.lag.monitor import LagMonitor
from pipeline.lag.offsets_topic import commit_feed_for
from pipeline.lag.report import render_table, to_report
from pipeline.lag.selection import GroupSelector
from pipeline.lag.snapshot import LagSnapshot
from pipeline.log import Log, LogInUseError, open_log
from pipeline.tables import OutputFormat, add_output_argument, document

__all__ = ["register"]

CLEAR_SCREEN = "\x1b[H\x1b[2J"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("lag")
    add_config_argument(parser, reads_existing_log=True)
    add_bootstrap_argument(parser)
    parser.add_argument("--group", help="only groups matching this regular expression (re.search)")
    add_output_argument(parser)
    parser.add_argument("--watch", action="store_true", help="refresh until interrupted")
    parser.add_argument(
        "--interval", type=float, default=5.0, help="seconds between refreshes with --watch (default 5)"
    )
    parser.add_argument(
        "--serve",
        metavar="HOST:PORT",
        help="run until interrupted, serving Burrow's HTTP API, /metrics and /healthz on this address",
    )
    parser.set_defaults(func=_lag)


def _print(snapshot: LagSnapshot, output: OutputFormat, clear: bool) -> None:
    if output is not OutputFormat.TABLE:
        text = document(to_report(snapshot).model_dump(mode="json"), output) + "\n"
    else:
        text = render_table(snapshot)
    sys.stdout.write((CLEAR_SCREEN if clear else "") + text)
    sys.stdout.flush()


async def run_lag(
    settings: Settings, group: str | None, output: OutputFormat, watch: bool, interval_s: float
) -> int:
    """Poll once and return the exit code (docs/cli.md): OK; FINDINGS when a group is ERR or over its
    lag-seconds limit; a failed poll raises `CommandError` with LOG_UNAVAILABLE.

    With `watch`, poll every `interval_s` until cancelled; failed polls show the stale table.
    """
    allow = [group] if group is not None else settings.lag.allow
    selector = GroupSelector(allow, settings.lag.deny)
    async with open_log(settings) as log:
        feed = commit_feed_for(log, settings.lag)
        monitor = LagMonitor(log, settings.lag, selector=selector, commit_feed=feed)
        try:
            while True:
                snapshot = await monitor.poll()
                if snapshot.stale and not watch:
                    raise CommandError(f"lag poll failed: {snapshot.error}", ExitCode.LOG_UNAVAILABLE)
                _print(snapshot, output, clear=watch and output is OutputFormat.TABLE)
                if not watch:
                    failed = snapshot.any_error or snapshot.any_over_threshold
                    return ExitCode.FINDINGS if failed else ExitCode.OK
                await asyncio.sleep(interval_s)
        finally:
            await monitor.close()


async def serve_lag(settings: Settings, group: str | None, addr: str) -> int:
    """Poll every `lag.poll_interval_s` and serve the API on `addr` until SIGINT or SIGTERM."""
    allow = [group] if group is not None else settings.lag.allow
    async with open_log(settings) as log:
        return await _serve(log, settings, GroupSelector(allow, settings.lag.deny), addr)


async def _serve(log: Log, settings: Settings, selector: GroupSelector, addr: str) -> int:
    component = LagComponent(log, settings.lag, selector=selector)
    app = web.Application()
    app.add_routes(burrow_routes(lambda: component.monitor, settings.lag.cluster_name))
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    runner = web.AppRunner(app, access_log=None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    try:
        await component.start()
        await runner.setup()
        host, port = split_host_port(addr)
        await web.TCPSite(runner, host, port).start()
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"reverser: lag API on http://{host}:{bound}/v3/kafka", file=sys.stderr, flush=True)
        await stop.wait()
        return ExitCode.OK
    finally:
        await runner.cleanup()
        await component.stop()


async def _metrics(_request: web.Request) -> web.Response:
    response = web.Response(body=generate_latest(REGISTRY))
    response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return response


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _lag(args: argparse.Namespace) -> int:
    if args.group is not None:
        try:
            re.compile(args.group)
        except re.error as exc:
            raise usage_error(f"--group {args.group!r} is not a regular expression: {exc}") from None
    if args.interval <= 0:
        raise usage_error("--interval must be positive")
    if args.serve is not None:
        try:
            split_host_port(args.serve)
        except ValueError as exc:
            raise usage_error(f"--serve: {exc}") from None
    settings = settings_from_args(args)
    try:
        if args.serve is not None:
            return asyncio.run(serve_lag(settings, args.group, args.serve))
        return asyncio.run(run_lag(settings, args.group, args.output, args.watch, args.interval))
    except KeyboardInterrupt:
        return ExitCode.OK
    except LogInUseError as exc:
        # The service holding the embedded log runs the lag monitor itself: point at its API.
        host, port = split_host_port(settings.metrics.addr)
        raise CommandError(
            f"log unavailable: {exc}: while it runs, ask its lag monitor: curl -s "
            f"http://{host}:{port}/v3/kafka/{settings.lag.cluster_name}/consumer",
            ExitCode.UNAVAILABLE,
        ) from None
