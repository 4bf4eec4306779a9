"""What every `reverser` command's exit code means, and the error a command stops with.

One table for every command (docs/cli.md): a script that runs `reverser topics check`, `reverser
lag` or `reverser replay branch` tells "found problems" from "could not run" the same way. A
command stops with `CommandError`; `pipeline.cli` prints it on stderr as `reverser <command>:
<message>` (the command path as typed, e.g. `reverser topics check: ...`; details such as the
fields of an invalid configuration follow on indented lines) and exits with its code.
Configuration errors, an unusable log and OS errors (`pipeline.failures`) need no wrapping: the
entry point maps them to `USAGE` and `UNAVAILABLE` itself.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["CommandError", "ExitCode", "usage_error"]


class ExitCode(IntEnum):
    """The exit codes of every `reverser` command."""

    #: Done, and nothing to report.
    OK = 0
    #: The command did its job and the outcome is negative: drift or lag found, a failed check,
    #: rule problems, invalid custom resources, a replay that could not push.
    FINDINGS = 1
    #: Bad command line, configuration or input file: the message names it; nothing was done.
    USAGE = 2
    #: A service or resource the command needs is unavailable: the log (broker unreachable,
    #: embedded log held by a service), an apiserver, a listen address already in use.
    UNAVAILABLE = 3
    #: The name the log's case had before apiservers and addresses shared the code.
    LOG_UNAVAILABLE = 3


class CommandError(Exception):
    """A command cannot go on; the entry point prints the message and exits with `code`."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FINDINGS) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CommandError:
    """A `CommandError` for a bad argument, configuration value or input file."""
    return CommandError(message, ExitCode.USAGE)
