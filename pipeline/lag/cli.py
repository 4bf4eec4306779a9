"""`reverser lag`: the consumer-lag table (or JSON) for the configured log, once or refreshed.

One shot takes a single sample: lag in seconds is shown only where a partition is caught up (0)
and is `-` (JSON null) elsewhere, because one log-end observation cannot place an offset in time;
nothing is persisted between runs. `--watch` keeps the monitor's history, so lag seconds and the
window-based statuses fill in from the second refresh. Exit code 1 when a selected group is ERR.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any

from pipeline.config import Settings
from pipeline.lag.monitor import LagMonitor
from pipeline.lag.offsets_topic import commit_feed_for
from pipeline.lag.report import render_table, to_report
from pipeline.lag.selection import GroupSelector
from pipeline.lag.snapshot import LagSnapshot
from pipeline.log import LogError, open_log
from pipeline.service.cli import add_config_argument, settings_from_args

__all__ = ["register"]

CLEAR_SCREEN = "\x1b[H\x1b[2J"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lag", help="consumer-lag table with a Burrow-style status per group and partition"
    )
    add_config_argument(parser)
    parser.add_argument("--group", help="only groups matching this regular expression (re.search)")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument("--watch", action="store_true", help="refresh until interrupted")
    parser.add_argument(
        "--interval", type=float, default=5.0, help="seconds between refreshes with --watch (default 5)"
    )
    parser.set_defaults(func=_lag)


def _print(snapshot: LagSnapshot, output: str, clear: bool) -> None:
    if output == "json":
        text = to_report(snapshot).model_dump_json(indent=2) + "\n"
    else:
        text = render_table(snapshot)
    sys.stdout.write((CLEAR_SCREEN if clear else "") + text)
    sys.stdout.flush()


async def run_lag(settings: Settings, group: str | None, output: str, watch: bool, interval_s: float) -> int:
    """Poll once and return the exit code (0, 1 when a group is ERR, 2 when the poll failed).

    With `watch`, poll every `interval_s` until cancelled; failed polls show the stale table.
    """
    allow = [group] if group is not None else settings.lag.allow
    selector = GroupSelector(allow, settings.lag.deny)
    log = open_log(settings)
    await log.start()
    monitor = LagMonitor(log, settings.lag, selector=selector, commit_feed=commit_feed_for(log, settings.lag))
    try:
        while True:
            snapshot = await monitor.poll()
            if snapshot.stale and not watch:
                print(f"reverser: lag poll failed: {snapshot.error}", file=sys.stderr)
                return 2
            _print(snapshot, output, clear=watch and output == "table")
            if not watch:
                return 1 if snapshot.any_error else 0
            await asyncio.sleep(interval_s)
    finally:
        await monitor.close()
        await log.close()


def _lag(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if args.group is not None:
        try:
            re.compile(args.group)
        except re.error as exc:
            print(f"reverser: --group {args.group!r} is not a regular expression: {exc}", file=sys.stderr)
            return 2
    if args.interval <= 0:
        print("reverser: --interval must be positive", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_lag(settings, args.group, args.output, args.watch, args.interval))
    except KeyboardInterrupt:
        return 0
    except LogError as exc:
        print(f"reverser: log unavailable: {exc}", file=sys.stderr)
        return 2
