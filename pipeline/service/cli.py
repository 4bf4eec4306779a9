"""`reverser run`: the service on the configured (or embedded default) log."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from pipeline.config import Settings, load_settings
from pipeline.exitcodes import ExitCode, usage_error
from pipeline.service.app import Service, run_until_signalled


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and `--workdir DIR`, shared by every subcommand that opens the log."""
    parser.add_argument("--config", type=Path, help="YAML configuration file (default: none)")
    parser.add_argument(
        "--workdir", type=Path, help="state directory for the embedded log and Git clones"
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Load configuration and apply command-line overrides; raises ConfigError naming the field."""
    return load_with_overrides(args)


def load_with_overrides(args: argparse.Namespace) -> Settings:
    """The file with the command line's overrides applied; raises ConfigError (SIGHUP reloads it)."""
    settings = load_settings(args.config)
    overrides: dict[str, Any] = {}
    if getattr(args, "workdir", None) is not None:
        overrides["workdir"] = args.workdir
    if getattr(args, "audit_addr", None):
        overrides["audit"] = settings.audit.model_copy(update={"addr": args.audit_addr})
    if getattr(args, "metrics_addr", None):
        overrides["metrics"] = settings.metrics.model_copy(update={"addr": args.metrics_addr})
    if overrides:
        settings = settings.model_copy(update=overrides)
    return settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run the pipeline service")
    add_config_argument(parser)
    parser.add_argument("--audit-addr", help="audit webhook listen address HOST:PORT")
    parser.add_argument("--metrics-addr", help="metrics/health listen address HOST:PORT")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="replay the bundled recording through every stage into a local Git remote in the workdir",
    )
    parser.add_argument("--once", action="store_true", help="with --demo: exit when the replay is committed")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if args.once and not args.demo:
        raise usage_error("--once only applies to --demo")
    if args.demo:
        from pipeline.demo.runner import run_demo

        return asyncio.run(run_demo(settings, once=args.once))
    asyncio.run(run_until_signalled(Service(settings, reload=lambda: load_with_overrides(args))))
    return ExitCode.OK
