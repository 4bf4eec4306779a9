"""The `reverser` command line: one subcommand per tool, each registered by its own package."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pipeline import replay
from pipeline.attribution import cli as attribution_cli
from pipeline.config import ConfigError
from pipeline.customresources import cli as customresources_cli
from pipeline.deadletter import cli as deadletter_cli
from pipeline.doctor import cli as doctor_cli
from pipeline.exitcodes import CommandError, ExitCode
from pipeline.lag import cli as lag_cli
from pipeline.log import LogError
from pipeline.log import cli as log_cli
from pipeline.service import cli as service_cli
from pipeline.watch import cli as watch_cli

# Each package's `register(subparsers)`, in help order; the subcommand sets `func(args) -> int` and
# stops with `CommandError`, `ConfigError` or `LogError` when it cannot go on (`run_command`).
SUBCOMMANDS: tuple[Callable[[Any], None], ...] = (
    service_cli.register,
    log_cli.register,
    lag_cli.register,
    attribution_cli.register,
    watch_cli.register,
    replay.register,
    deadletter_cli.register,
    doctor_cli.register,
    customresources_cli.register,
)


def package_version() -> str:
    """The installed distribution's version: what an image or a bug report is pinned to."""
    try:
        return importlib.metadata.version("reverser-pipeline")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed as a package)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reverser",
        description="Every change to a Kubernetes cluster as an attributed Git commit, via Kafka.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {package_version()}",
        help="print the installed package version and exit",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging verbosity (default INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def command_name(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The subcommand path the arguments chose, e.g. "topics check"."""
    names: list[str] = []
    current = parser
    while True:
        action = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, action.dest, None) if action is not None else None
        if action is None or chosen is None:
            return " ".join(names)
        names.append(chosen)
        current = action.choices[chosen]


def run_command(name: str, command: Callable[[], int]) -> int:
    """Run a command and turn how it stopped into the exit code and error line of docs/cli.md."""
    try:
        return int(command())
    except CommandError as exc:
        code, message = exc.code, str(exc)
    except ConfigError as exc:
        code, message = ExitCode.USAGE, str(exc)
    except LogError as exc:
        code, message = ExitCode.LOG_UNAVAILABLE, f"log unavailable: {exc}"
    print(f"reverser {name}: {message}", file=sys.stderr)
    return int(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return run_command(command_name(parser, args), lambda: int(args.func(args)))


if __name__ == "__main__":
    sys.exit(main())
