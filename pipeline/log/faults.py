"""Crash points for fault-injection tests of the exactly-once and fencing guarantees.

`REVERSER_CRASH_AT=<point>` makes the process kill itself with SIGKILL the first time it reaches
that point; `<point>:<n>` the n-th time. Only tests set the variable: a real kill at the exact
moment between two steps (say, records written but the commit point not yet reached) is the only
way to show what a crash there leaves behind. Unset, a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_AT_ENV", "crash_point"]

CRASH_AT_ENV = "REVERSER_CRASH_AT"

_reached: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process if `REVERSER_CRASH_AT` names this point (and its count is reached)."""
    wanted = os.environ.get(CRASH_AT_ENV)
    if not wanted or not wanted.startswith(name):
        return
    point, _, count = wanted.partition(":")
    if point != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] >= (int(count) if count.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)
