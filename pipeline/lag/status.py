"""Burrow's consumer status rules over a sliding window of committed offsets.

A partition's status says more than its lag: a consumer with a large but shrinking lag is fine,
one whose lag has not been zero and that stopped committing is dead. The rules and their order
follow Burrow's evaluator (STOP, REWIND, OK when the lag touched zero, STALL, WARN, else OK); a
group's status is its worst partition, with every error status shown as ERR for the group.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Iterable, Sequence
from operator import ge, lt

__all__ = [
    "CommitWindow",
    "Status",
    "group_status",
    "partition_status",
]


class Status(enum.StrEnum):
    """Partition statuses (all six) and group statuses (OK, WARN, ERR)."""

    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"

    @property
    def severity(self) -> int:
        """Burrow's ordering: higher is worse."""
        return _SEVERITY[self]

    @property
    def is_error(self) -> bool:
        return self.severity >= _SEVERITY[Status.ERR]


_SEVERITY = {
    Status.OK: 1,
    Status.WARN: 2,
    Status.ERR: 3,
    Status.STOP: 4,
    Status.STALL: 5,
    Status.REWIND: 6,
}

GROUP_STATUSES = (Status.OK, Status.WARN, Status.ERR)


def partition_status(
    offsets: Sequence[int],
    lags: Sequence[int],
    times_ms: Sequence[int],
    current_lag: int,
    now_ms: int,
    min_span_ms: int = 0,
) -> Status:
    """Evaluate one partition; the three sequences describe the window, oldest first.

    `times_ms` are commit times. An empty window carries no evidence and is OK, and so is a
    partition with no lag now: an idle topic whose consumer is caught up never stops. STOP needs
    the silence to exceed the window's span and `min_span_ms` (the poll interval), so a single
    commit read moments ago does not count as a consumer that stopped.
    """
    if not offsets or current_lag <= 0:
        return Status.OK
    first_ms = times_ms[0]
    last_ms = times_ms[-1]
    if now_ms - last_ms > max(last_ms - first_ms, min_span_ms):
        return Status.STOP
    if any(map(lt, offsets[1:], offsets)):
        return Status.REWIND
    if 0 in lags or len(offsets) < 2:
        return Status.OK
    if offsets.count(offsets[0]) == len(offsets):
        return Status.STALL
    if all(map(ge, lags[1:], lags)):
        return Status.WARN
    return Status.OK


def group_status(statuses: Iterable[Status]) -> Status:
    """The worst partition status, with STOP, STALL and REWIND reported as ERR."""
    worst = Status.OK
    for status in statuses:
        if status.severity > worst.severity:
            worst = status
    return Status.ERR if worst.is_error else worst


class CommitWindow:
    """The last N commits of one partition by one group: (offset, lag at commit, commit time).

    Commits closer together than `min_distance_ms` share one slot (the newest wins, the slot keeps
    the time it was opened), so a consumer committing every few milliseconds still has a window
    spanning N poll intervals, as with Burrow's `min-distance`. Stored flat in one `array` of
    machine integers because a monitor holds one window per group partition.
    """

    __slots__ = ("_data", "_size")

    _FIELDS = 4  # offset, lag, commit time, slot opened at

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("window size must be at least 1")
        self._size = size
        self._data = array("q")

    def __len__(self) -> int:
        return len(self._data) // self._FIELDS

    def add(self, offset: int, lag: int, commit_ms: int, min_distance_ms: int) -> None:
        """Record a commit; replaces the newest slot when it opened less than `min_distance_ms` ago."""
        data = self._data
        if data and commit_ms - data[-1] < min_distance_ms:
            data[-4] = offset
            data[-3] = lag
            data[-2] = commit_ms
            return
        data.extend((offset, lag, commit_ms, commit_ms))
        if len(data) > self._size * self._FIELDS:
            del data[: self._FIELDS]

    @property
    def last_commit_ms(self) -> int | None:
        return self._data[-2] if self._data else None

    @property
    def last_offset(self) -> int | None:
        return self._data[-4] if self._data else None

    def offsets(self) -> list[int]:
        return self._data[0 :: self._FIELDS].tolist()

    def status(self, current_lag: int, now_ms: int, min_span_ms: int = 0) -> Status:
        data = self._data
        if current_lag <= 0 or not data:
            return Status.OK
        return partition_status(
            data[0::4], data[1::4], data[2::4], current_lag, now_ms, min_span_ms
        )
