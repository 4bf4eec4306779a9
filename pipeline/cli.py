"""The `reverser` command line: one subcommand per tool, each registered by its own package."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# Each module exposes `register(subparsers)`; the subcommand sets `func(args) -> int`.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "pipeline.service.cli",
    "pipeline.log.cli",
    "pipeline.lag.cli",
    "pipeline.attribution.cli",
    "pipeline.watch.cli",
    "pipeline.replay",
    "pipeline.deadletter.cli",
    "pipeline.doctor.cli",
    "pipeline.customresources.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reverser",
        description="Every change to a Kubernetes cluster as an attributed Git commit, via Kafka.",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging verbosity (default INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
