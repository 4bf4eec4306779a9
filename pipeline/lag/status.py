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
from operator import ge
from typing import cast

__all__ = [
    "LAG_CAP",
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
PARTITION_STATUSES = (Status.OK, Status.WARN, Status.STOP, Status.STALL, Status.REWIND)


def partition_status(
    offsets: Sequence[int],
    lags: Sequence[int],
    times_ms: Sequence[int],
    current_lag: int,
    now_ms: int,
    min_span_ms: int = 0,
    last_seen_ms: int | None = None,
) -> Status:
    """Evaluate one partition; the three sequences describe the window entries, oldest first.

    `times_ms` are the entries' first commit times (Burrow's timing for STOP; only the oldest and
    the newest are read, so a caller may pass just those two); `last_seen_ms` is
    the newest commit seen at all (defaults to the newest entry's time). An empty window carries
    no evidence and is OK, and so is a partition with no lag now: an idle topic whose consumer is
    caught up never stops. STOP needs the silence since the newest entry to exceed the window's
    span and `min_span_ms` (the poll interval), and no commit within `min_span_ms` of now, so a
    single commit read moments ago is not a consumer that stopped (Burrow reports that as STOP).
    REWIND holds while the newest offset is below the highest offset committed before it in the
    window: it clears once the consumer is back at or past where it was before going back.
    """
    if not offsets or current_lag <= 0:
        return Status.OK
    first_ms = times_ms[0]
    last_ms = times_ms[-1]
    seen_ms = last_ms if last_seen_ms is None else max(last_seen_ms, last_ms)
    if now_ms - last_ms > max(last_ms - first_ms, min_span_ms) and now_ms - seen_ms > min_span_ms:
        return Status.STOP
    if len(offsets) > 1 and offsets[-1] < max(offsets[:-1]):
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


# Window entries pack (lag, first commit time - base) into one 64-bit integer: 31 bits of lag
# (larger lags compare as this cap) and 32 bits of milliseconds (about 49 days from the base).
LAG_CAP = (1 << 31) - 1
_TIME_SPAN_MS = 1 << 32
_TIME_MASK = _TIME_SPAN_MS - 1
_COUNT, _BASE, _SEEN = 0, 1, 2
_HEADER = 3


class CommitWindow(array):  # type: ignore[type-arg]
    """The last N commits of one partition by one group: (offset, lag at commit, first commit time).

    Commits closer together than `min_distance_ms` to the newest entry's first commit share that
    entry: the newest offset and lag win, the entry keeps its first commit time (as Burrow's
    `min-distance`), so a consumer committing every few milliseconds still has a window spanning
    N poll intervals and STOP is timed from the first commit of the newest entry. The newest
    commit time seen is kept apart for the STOP guard. A commit older than the newest entry's
    first commit arrived out of order and is dropped.

    A monitor holds one window per group partition, so a window is one `array` of machine
    integers allocated once at its full size (no per-object dict, no growth slack): entry
    count, base time, newest commit time, then N offsets and N packed (lag, time) values.
    """

    __slots__ = ()

    def __new__(cls, size: int) -> CommitWindow:
        if size < 1:
            raise ValueError("window size must be at least 1")
        return cast(CommitWindow, super().__new__(cls, "q", bytes(8 * (_HEADER + 2 * size))))

    def __len__(self) -> int:
        return int(self[_COUNT])

    @property
    def capacity(self) -> int:
        return (super().__len__() - _HEADER) // 2

    def add(self, offset: int, lag: int, commit_ms: int, min_distance_ms: int) -> None:
        """Record a commit; merges into the newest entry when it opened less than `min_distance_ms` ago."""
        count = int(self[_COUNT])
        size = self.capacity
        if count and commit_ms < self._time(count - 1):
            return  # older than the newest entry: arrived out of time order, as Burrow drops it
        self[_SEEN] = max(self[_SEEN], commit_ms) if count else commit_ms
        if count and commit_ms - self._time(count - 1) < min_distance_ms:
            newest = _HEADER + count - 1
            self[newest] = offset
            self[newest + size] = self._pack(lag, self._time(count - 1))
            return
        if not count:
            self[_BASE] = commit_ms
        self._fit(commit_ms)
        count = int(self[_COUNT])
        if count == size:
            offsets_end = _HEADER + size
            self[_HEADER : offsets_end - 1] = self[_HEADER + 1 : offsets_end]
            self[offsets_end : offsets_end + size - 1] = self[offsets_end + 1 :]
            count -= 1
        self[_HEADER + count] = offset
        self[_HEADER + size + count] = self._pack(lag, commit_ms)
        self[_COUNT] = count + 1

    @property
    def last_commit_ms(self) -> int | None:
        """The newest commit seen (not the newest entry's first commit)."""
        return int(self[_SEEN]) if self[_COUNT] else None

    @property
    def last_offset(self) -> int | None:
        count = int(self[_COUNT])
        return int(self[_HEADER + count - 1]) if count else None

    def offsets(self) -> list[int]:
        return self[_HEADER : _HEADER + int(self[_COUNT])].tolist()

    def entries(self) -> list[tuple[int, int, int]]:
        """(offset, lag, first commit time) per entry, oldest first."""
        base = int(self[_BASE])
        packed = self._packed()
        return [(o, p >> 32, base + (p & _TIME_MASK)) for o, p in zip(self.offsets(), packed, strict=True)]

    def status(self, current_lag: int, now_ms: int, min_span_ms: int = 0) -> Status:
        count = int(self[_COUNT])
        if current_lag <= 0 or not count:
            return Status.OK
        packed = self._packed()
        base = int(self[_BASE])
        return partition_status(
            self.offsets(),
            [p >> 32 for p in packed],
            (base + (packed[0] & _TIME_MASK), base + (packed[-1] & _TIME_MASK)),
            current_lag,
            now_ms,
            min_span_ms,
            int(self[_SEEN]),
        )

    def _packed(self) -> list[int]:
        start = _HEADER + self.capacity
        return self[start : start + int(self[_COUNT])].tolist()

    def _time(self, index: int) -> int:
        packed = int(self[_HEADER + self.capacity + index])
        return int(self[_BASE]) + (packed & _TIME_MASK)

    def _pack(self, lag: int, commit_ms: int) -> int:
        return (min(max(lag, 0), LAG_CAP) << 32) | (commit_ms - int(self[_BASE]))

    def _fit(self, commit_ms: int) -> None:
        """Move the base time so `commit_ms` fits; entries over 49 days older than it are dropped."""
        base = int(self[_BASE])
        if base <= commit_ms < base + _TIME_SPAN_MS:
            return
        kept = [e for e in self.entries() if commit_ms - e[2] < _TIME_SPAN_MS]
        size = self.capacity
        self[_BASE] = min([commit_ms, *(e[2] for e in kept)])
        self[_COUNT] = len(kept)
        for index, (offset, lag, time_ms) in enumerate(kept):
            self[_HEADER + index] = offset
            self[_HEADER + size + index] = self._pack(lag, time_ms)
