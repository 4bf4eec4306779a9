"""The `reverser` command line: one subcommand per tool, each registered by its own package.

Only the chosen subcommand's package is imported (`reverser --help` lists the others from
`SUBCOMMANDS` without importing them: the stages pull in aiokafka, aiohttp and the Kubernetes
client, seconds of start-up that a help screen or a typo should not pay). The global options
(`--log-level`, `--log-format`, `--debug`, `--config`) are accepted before or after the
subcommand. Every failure is translated here, at the edge, into one line `reverser <command>:
<what failed>: <what to check>` and the exit code of docs/cli.md; `--debug` adds the traceback and
the client libraries' own logging.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from pipeline.buildinfo import describe_version
from pipeline.exitcodes import CommandError, ExitCode
from pipeline.failures import from_os_error
from pipeline.logoutput import LOG_FORMAT_VARIABLE, LOG_LEVEL_VARIABLE, LogFormat, formatter_for

__all__ = [
    "SUBCOMMANDS",
    "Given",
    "LibraryNoise",
    "Subcommand",
    "build_parser",
    "command_name",
    "did_you_mean",
    "main",
    "run_command",
    "translate",
]


@dataclass(frozen=True)
class Subcommand:
    """A top-level subcommand: its name, the line `reverser --help` shows, and the module whose
    `register(subparsers)` adds its parser (imported only when the subcommand is chosen)."""

    name: str
    summary: str
    module: str


#: In help order; each subcommand sets `func(args) -> int` and stops with `CommandError`,
#: `ConfigError`, `LogError` or an `OSError` when it cannot go on (`run_command`).
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("run", "run the pipeline service", "pipeline.service.cli"),
    Subcommand("topics", "create or verify the pipeline's topics", "pipeline.log.cli"),
    Subcommand(
        "lag", "consumer-lag table with a Burrow-style status per group and partition", "pipeline.lag.cli"
    ),
    Subcommand(
        "resolve",
        "attribute recorded watch events from recorded audit events (offline)",
        "pipeline.attribution.cli",
    ),
    Subcommand(
        "watch-rules",
        "show the watch streams the rules resolve to and the entries that are not watched",
        "pipeline.watch.cli",
    ),
    Subcommand("replay", "rebuild state (a Git branch, the fact index) from the log", "pipeline.replay"),
    Subcommand(
        "dead-letter",
        "list, show and replay records a stage could not decode or apply",
        "pipeline.deadletter.cli",
    ),
    Subcommand(
        "doctor",
        "check the configuration, the log, the clusters, the Git remotes and the audit routes",
        "pipeline.doctor.cli",
    ),
    Subcommand(
        "config",
        "the configuration's documented JSON schema; custom resources: check, export",
        "pipeline.customresources.cli",
    ),
    Subcommand("version", "print the version and the Git commit it was built from", "pipeline.buildinfo"),
    Subcommand("completion", "print a bash or zsh completion script for reverser", "pipeline.completion"),
)

#: Options before the subcommand that take a value: the pre-scan for the subcommand skips it.
_VALUED_GLOBALS = frozenset({"--log-level", "--log-format", "--config"})
#: Client libraries whose logging only `--debug` shows: their errors repeat, in their own words,
#: what the command's one error line says.
LIBRARY_LOGGERS = ("aiokafka", "kafka", "kubernetes_asyncio", "aiohttp", "git", "urllib3")
#: A command stopped by Ctrl-C exits as a shell reports a process ended by SIGINT.
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: A command whose output's reader went away exits as a process ended by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
#: How close a typo must be to a real name for "did you mean" (difflib's ratio).
SUGGEST_CUTOFF = 0.6


class LogLevel(StrEnum):
    """What `--log-level` accepts: the logging module's names."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the nearest choice ("did you mean ...?")."""

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match is not None:
            choices = re.findall(r"'([^']*)'", match["choices"])
            message += did_you_mean(match["given"], choices)
        super().error(message)


def did_you_mean(given: str, known: Sequence[str]) -> str:
    """` (did you mean X?)` for the closest of `known`, or nothing when none is close."""
    close = difflib.get_close_matches(given, known, n=1, cutoff=SUGGEST_CUTOFF)
    return f" (did you mean {close[0]}?)" if close else ""


class _VersionAction(argparse.Action):
    """`--version`: the version line of `reverser version`, computed only when asked (it may run git)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="print the version and the Git commit it was built from, and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        print(describe_version())
        parser.exit()


class _Registrar:
    """What a package's `register` sees as `subparsers`: its parser gets the summary of
    `SUBCOMMANDS`, so `reverser --help` reads the same whether or not the package was imported."""

    def __init__(self, subparsers: Any, summary: str) -> None:
        self._subparsers = subparsers
        self._summary = summary

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["help"] = self._summary
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named in `argv`, looking past the global options before it."""
    names = {s.name for s in SUBCOMMANDS}
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == "--":
            return None
        elif token.startswith("-"):
            skip = token in _VALUED_GLOBALS
        else:
            return token if token in names else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: every subcommand's name and summary, and the full parser of the one
    `argv` chooses (of every subcommand without `argv`, for tests and docs that walk them all)."""
    parser = _Parser(
        prog="reverser",
        description="Every change to a Kubernetes cluster as an attributed Git commit, via Kafka.",
    )
    parser.add_argument("--version", action=_VersionAction)
    _add_global_options(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen(argv) if argv is not None else None
    for subcommand in SUBCOMMANDS:
        if argv is None or subcommand.name == chosen:
            module = importlib.import_module(subcommand.module)
            module.register(_Registrar(subparsers, subcommand.summary))
        else:
            subparsers.add_parser(subcommand.name, help=subcommand.summary, add_help=False)
    for sub in _subparsers_of(parser):
        _add_global_options(sub, top=False)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """`--log-level`, `--debug` and `--config` on the top parser, with their defaults, and on every
    subcommand's without (`SUPPRESS`), so a value given before the subcommand is not reset by it."""
    existing = {action.dest: action for action in parser._actions}
    if "log_level" not in existing:
        parser.add_argument(
            "--log-level",
            choices=[level.value for level in LogLevel],
            default=LogLevel.INFO.value if top else argparse.SUPPRESS,
            help=f"logging verbosity (default ${LOG_LEVEL_VARIABLE}, else INFO)",
        )
    if "log_format" not in existing:
        parser.add_argument(
            "--log-format",
            choices=[f.value for f in LogFormat],
            default=LogFormat.TEXT.value if top else argparse.SUPPRESS,
            help=f"log lines as text or one JSON object each (default ${LOG_FORMAT_VARIABLE}, else text)",
        )
    if "debug" not in existing:
        parser.add_argument(
            "--debug",
            action="store_true",
            default=False if top else argparse.SUPPRESS,
            help="on failure, print the traceback; show the client libraries' logging",
        )
    if top:
        parser.add_argument(
            "--config",
            type=Path,
            default=None,
            help="YAML configuration file, for the commands that read one",
        )
    elif "config" in existing:
        # A required `--config` may come before the subcommand: `_parse` checks it afterwards.
        config = existing["config"]
        if config.required:
            parser.set_defaults(config_required=True)
        config.default, config.required = argparse.SUPPRESS, False


def _subparsers_of(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below `parser`, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield sub
                yield from _subparsers_of(sub)


def _chosen_path(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> list[tuple[str, argparse.ArgumentParser]]:
    """The subcommands the arguments chose, outermost first, each with its parser."""
    path: list[tuple[str, argparse.ArgumentParser]] = []
    current = parser
    while True:
        action = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, action.dest, None) if action is not None else None
        if action is None or chosen is None:
            return path
        current = action.choices[chosen]
        path.append((chosen, current))


def command_name(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The subcommand path the arguments chose, e.g. "topics check"."""
    return " ".join(name for name, _ in _chosen_path(parser, args))


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    parser.set_defaults(
        log_level=_from_environment(
            parser, LOG_LEVEL_VARIABLE, [level.value for level in LogLevel], LogLevel.INFO.value
        ),
        log_format=_from_environment(
            parser, LOG_FORMAT_VARIABLE, [f.value for f in LogFormat], LogFormat.TEXT.value
        ),
    )
    args, extras = parser.parse_known_args(argv)
    chosen = _chosen_path(parser, args)
    leaf = chosen[-1][1] if chosen else parser
    if extras:
        known = [option for action in leaf._actions for option in action.option_strings]
        flag = next((e.partition("=")[0] for e in extras if e.startswith("--")), "")
        leaf.error(f"unrecognized arguments: {' '.join(extras)}{did_you_mean(flag, known) if flag else ''}")
    config_action = next((a for a in leaf._actions if a.dest == "config"), None)
    if args.config is not None and config_action is None:
        leaf.error("--config does not apply to this command")
    if getattr(args, "config_required", False) and args.config is None:
        leaf.error("the following arguments are required: --config")
    return args


def _from_environment(
    parser: argparse.ArgumentParser, variable: str, choices: list[str], default: str
) -> str:
    """A global option's default from `variable` (the flag still wins), checked like the flag."""
    value = os.environ.get(variable, "")
    if not value:
        return default
    if value not in choices:
        parser.error(
            f"{variable}: invalid choice: {value!r} (choose from {', '.join(choices)})"
            f"{did_you_mean(value, choices)}"
        )
    return value


class LibraryNoise(logging.Filter):
    """Keeps the client libraries' records below CRITICAL off the output (unless `--debug`).

    A filter on the output handlers, not a level on the libraries' loggers: the Kafka backend
    reads aiokafka's ERROR records to tell rejected credentials from a broker that is down
    (`pipeline.log.kafka.clients.BootstrapFailures`), so those records must still be emitted.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.CRITICAL:
            return True
        return not any(record.name == name or record.name.startswith(f"{name}.") for name in LIBRARY_LOGGERS)


def _configure_logging(level: str, log_format: LogFormat, debug: bool) -> None:
    output = logging.StreamHandler(sys.stderr)
    output.setFormatter(formatter_for(log_format))
    logging.basicConfig(level=level, handlers=[output])
    if not debug:
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, LibraryNoise) for f in handler.filters):
                handler.addFilter(LibraryNoise())


#: What to check when the brokers named by `-b/--bootstrap-server` cannot be reached: the flag, not
#: the setting it overrode, is what the person typed.
FLAG_UNREACHABLE_HINT = "check -b/--bootstrap-server and that the brokers are up"


@dataclass(frozen=True)
class Given:
    """What the command line itself gave, so an error's hint can name the flag at fault rather
    than the setting it overrode: `bootstrap_flag` (the brokers came from `-b`), and `paths`, each
    path given to its option (`{"/srv/x": "--into"}`)."""

    bootstrap_flag: bool = False
    paths: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Given:
        chosen = _chosen_path(parser, args)
        leaf = chosen[-1][1] if chosen else parser
        paths: dict[str, str] = {}
        for action in leaf._actions:
            value = getattr(args, action.dest, None) if action.option_strings else None
            for item in value if isinstance(value, list) else [value]:
                # A Path, or a string that reads as one (`--into` takes a URL or a directory).
                if isinstance(item, Path) or (isinstance(item, str) and os.sep in item):
                    paths[str(item)] = max(action.option_strings, key=len)
        return cls(getattr(args, "bootstrap_server", None) is not None, paths)


def translate(exc: BaseException, given: Given | None = None) -> CommandError | None:
    """The command-line error for how a command stopped, or None for a bug (its traceback shows).

    With `given`, a hint names the flag the person typed: `-b/--bootstrap-server` instead of
    `log.bootstrap_servers` when the brokers came from it, the option whose path failed."""
    given = given or Given()
    error = _translate(exc, given)
    kafka_errors = sys.modules.get("pipeline.log.kafka.errors")
    if error is None or not given.bootstrap_flag or kafka_errors is None:
        return error
    setting_hint: str = kafka_errors.UNREACHABLE_HINT
    message = str(error)
    if setting_hint not in message:
        return error
    return CommandError(message.replace(setting_hint, FLAG_UNREACHABLE_HINT), error.code)


def _translate(exc: BaseException, given: Given) -> CommandError | None:
    if isinstance(exc, BaseExceptionGroup):
        return next(
            (e for e in (_translate(inner, given) for inner in exc.exceptions) if e is not None), None
        )
    if isinstance(exc, CommandError):
        return exc
    if _is_instance(exc, "pipeline.config", "ConfigError"):
        return CommandError(str(exc), ExitCode.USAGE)
    if _is_instance(exc, "pipeline.log.api", "LogError"):
        return CommandError(f"log unavailable: {exc}", ExitCode.UNAVAILABLE)
    if isinstance(exc, OSError):
        return from_os_error(exc, given.paths)
    if type(exc).__module__.startswith("aiokafka"):
        from pipeline.log.kafka.errors import UNREACHABLE_HINT, describe  # aiokafka is loaded by now

        return CommandError(f"Kafka: {describe(exc)}: {UNREACHABLE_HINT}", ExitCode.UNAVAILABLE)
    return None


def _is_instance(exc: BaseException, module: str, name: str) -> bool:
    """Whether `exc` is a `module.name`, without importing `module`: a command that never imported
    the configuration or the log cannot raise their errors, and importing them for the check would
    cost the start-up time that loading subcommands lazily saves."""
    kind = getattr(sys.modules.get(module), name, None)
    return isinstance(kind, type) and isinstance(exc, kind)


def run_command(
    name: str, command: Callable[[], int], *, debug: bool = False, given: Given | None = None
) -> int:
    """Run a command and turn how it stopped into the exit code and error line of docs/cli.md."""
    try:
        return int(command())
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of the output went away (`reverser doctor | head`): as for any Unix tool,
        # not an error to report. Later writes go nowhere, so the exit does not fail flushing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        error = translate(exc, given)
        if error is None:
            raise
        if debug:
            traceback.print_exception(exc)
    print(f"reverser {name}: {error}", file=sys.stderr)
    return int(error.code)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(arguments)
    args = _parse(parser, arguments)
    _configure_logging(args.log_level, LogFormat(args.log_format), args.debug)
    name = command_name(parser, args)
    return run_command(name, lambda: int(args.func(args)), debug=args.debug, given=Given.of(parser, args))


if __name__ == "__main__":
    sys.exit(main())
