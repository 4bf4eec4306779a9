"""Operating-system, network and client-library failures in plain words, and the exit code each means.

A command fails because a path, a port or a remote service let it down; what the person at the
terminal needs is what failed and what to check, not the exception's repr. `plain` says what
failed (for any exception chain: the innermost OS error's text, never a repr), `from_os_error`
turns an `OSError` that reached the command line into the `CommandError` of docs/cli.md: exit 2
when the input is at fault (a path that is missing, unwritable or not a directory), exit 3 when a
service or resource is unavailable (an address in use, a refused connection, a full disk).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping

from pipeline.exitcodes import CommandError, ExitCode

__all__ = ["from_os_error", "option_for", "os_cause", "plain"]

#: An address as asyncio and aiohttp print it inside a message: `('127.0.0.1', 9444)`.
_ADDRESS = re.compile(r"\('([^']*)', (\d+)")

#: errno values that mean the path given is wrong, with what to check; anything else is unavailable.
#: `{option}` is the command-line option that gave the path (`--workdir`, `--into`), else "path".
_INPUT_ERRNOS: dict[int, str] = {
    errno.ENOENT: "check the {option}",
    errno.ENOTDIR: "a part of the path is a file, not a directory: check the {option}",
    errno.EISDIR: "a directory is where a file is expected: pass the file's path",
    errno.EACCES: "check that this user may read or write there, or choose another {option}",
    errno.EPERM: "check that this user may read or write there, or choose another {option}",
    errno.EROFS: "the file system is read-only: choose another {option}",
    errno.ENAMETOOLONG: "shorten the {option}",
    errno.EEXIST: "remove it or choose another {option}",
}
_UNAVAILABLE_HINTS: dict[int, str] = {
    errno.EADDRINUSE: "another process listens there (a running `reverser run`?): stop it or choose "
    "another address (--audit-addr, --metrics-addr, --serve)",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine: check the listen address",
    errno.ECONNREFUSED: "nothing listens there: check the address and that the service is up",
    errno.ENOSPC: "the disk is full: free space on the file system written to",
}


def plain(exc: BaseException) -> str:
    """What failed, in words: the exception's own message without the class reprs that libraries put
    in (aiohttp's `ConnectionKey(...)`, aiokafka's address tuples), down to the OS error at its root."""
    root = os_cause(exc)
    if root is not None:
        return _os_text(root)
    text = str(exc).strip()
    return text or type(exc).__name__


def from_os_error(exc: OSError, given_paths: Mapping[str, str] | None = None) -> CommandError:
    """The command-line error for an OS error: `<what failed>: <what to check>`, with its exit code.

    `given_paths` maps each path the command line gave to its option (`{"/srv/x": "--into"}`): the
    hint names the option whose path failed, since one command may take several (`replay branch
    --workdir ... --into ...`)."""
    code = exc.errno or 0
    if code in _INPUT_ERRNOS:
        option = option_for(exc.filename, given_paths or {}) or "path"
        return CommandError(f"{_os_text(exc)}: {_INPUT_ERRNOS[code].format(option=option)}", ExitCode.USAGE)
    hint = _UNAVAILABLE_HINTS.get(code, "check the address or path and try again")
    return CommandError(f"{_os_text(exc)}: {hint}", ExitCode.UNAVAILABLE)


def option_for(filename: object, given_paths: Mapping[str, str]) -> str | None:
    """The option whose path is `filename` or lies below or above it (creating `--workdir
    /srv/a/b` fails at `/srv/a`), the closest one when several do."""
    if not isinstance(filename, str | bytes | os.PathLike) or not given_paths:
        return None
    failed = os.path.abspath(os.fsdecode(filename))
    related = [
        (abs(len(given) - len(failed)), option)
        for path, option in given_paths.items()
        if _related(failed, given := os.path.abspath(path))
    ]
    return min(related)[1] if related else None


def _related(one: str, other: str) -> bool:
    return one == other or one.startswith(other + os.sep) or other.startswith(one + os.sep)


def os_cause(exc: BaseException) -> OSError | None:
    """The innermost OS error of `exc`'s cause chain, if any."""
    found: OSError | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and (current.errno or current.strerror):
            found = current
        current = current.__cause__ or current.__context__
    return found


def _os_text(exc: OSError) -> str:
    """`<what>: <reason>` from an OS error's fields: its str() carries `[Errno N]` and address tuples."""
    raw = exc.strerror or str(exc)
    reason = os.strerror(exc.errno) if exc.errno else raw
    reason = reason[:1].lower() + reason[1:]
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    host, port = getattr(exc, "host", None), getattr(exc, "port", None)
    address = _ADDRESS.search(raw)
    if host is None and address is not None:
        host, port = address.group(1), address.group(2)
    if host is None:
        return reason
    verb = "cannot listen on" if "bind" in raw else "cannot connect to"
    return f"{verb} {host}:{port}: {reason}"
