"""`reverser run`: the service on the configured (or embedded default) log."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from pipeline.commandline import add_config_argument, load_with_overrides, settings_from_args
from pipeline.exitcodes import CommandError, ExitCode, usage_error
from pipeline.sealing import SealingError
from pipeline.service.app import Service, run_until_signalled


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run")
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
        _check_demo_requirements()
        from pipeline.service.demo import run_demo

        return asyncio.run(run_demo(settings, once=args.once))
    asyncio.run(run_until_signalled(Service(settings, reload=lambda: load_with_overrides(args))))
    return ExitCode.OK


def _check_demo_requirements() -> None:
    """The demo seals a Secret with SOPS and age: without the `secrets` extra it says so in one line
    instead of failing inside a stage."""
    try:
        import pyrage  # noqa: F401

        from pipeline.sealing.sealer import find_sops

        find_sops()
    except (ModuleNotFoundError, SealingError) as exc:
        missing = f"module {exc.name}" if isinstance(exc, ModuleNotFoundError) else "the sops binary"
        raise CommandError(
            f"--demo needs the secrets extra ({missing} is missing): "
            "pip install 'reverser-pipeline[secrets]'",
            ExitCode.UNAVAILABLE,
        ) from exc
