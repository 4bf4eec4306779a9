"""Work of parked providers: where it waits on the log, and reading it again once it may go on.

A provider whose access cannot be built (a key variable unset, a signing key unreadable) is
parked: its branches get no FIFO, so nothing of it is committed or pushed, while every other
provider goes on. Its records are not held in memory: each stays unsettled in the offset book, so
the partition's committed offset waits before the first of them (a restart or a new owner reads
them again), and this book remembers where each branch's first waiting record is. When the
provider is fixed or removed, the commit worker seeks the partition back there and the records of
the released branches come again, in log order, through the normal path (a FIFO, or a dead letter
for a provider no longer configured); every other record before the partition's position then was
handled already and is skipped.

Pure bookkeeping, no I/O: the commit worker asks `seeks` between two fetches, `wanted` for every
record fetched and `holds` for every record it would hand to a FIFO. A released branch holds its
records until its re-read starts, so a record fetched in between never overtakes older waiting
ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pipeline.log.api import TopicPartition

__all__ = ["BranchKey", "ParkedWork"]

#: (provider, branch)
BranchKey = tuple[str, str]


@dataclass(slots=True)
class _Rereading:
    """One partition being read again: up to `upto` only the released branches' records, each from
    its own offset on (moved past every record taken, so a second seek never repeats one)."""

    upto: int
    branches: dict[BranchKey, int] = field(default_factory=dict)


class ParkedWork:
    """Where the waiting work of parked providers' branches starts, per branch, and the re-reads."""

    __slots__ = ("_released", "_rereading", "_waiting")

    def __init__(self) -> None:
        self._waiting: dict[BranchKey, tuple[TopicPartition, int]] = {}
        self._released: set[BranchKey] = set()
        self._rereading: dict[TopicPartition, _Rereading] = {}

    def hold(self, key: BranchKey, tp: TopicPartition, offset: int) -> None:
        """A record of `key` waits (left unsettled by the caller); the first one is remembered."""
        self._waiting.setdefault(key, (tp, offset))

    def holds(self, key: BranchKey) -> bool:
        """Whether `key` has work waiting (parked, or released and not yet read again)."""
        return key in self._waiting

    def waiting(self, provider: str) -> int:
        """How many branches of `provider` have work waiting."""
        return sum(1 for p, _ in self._waiting if p == provider)

    def release(self, provider: str) -> None:
        """`provider` was fixed or removed: its branches' work is read again from the next `seeks`."""
        self._released.update(k for k in self._waiting if k[0] == provider)

    def seeks(self, position: Callable[[TopicPartition], int]) -> dict[TopicPartition, int]:
        """Where to move each partition with released work; `position(tp)` is the offset after the
        last record fetched from it (everything before that was handled or waits)."""
        moves: dict[TopicPartition, int] = {}
        for key in sorted(self._released):
            tp, offset = self._waiting.pop(key)
            reread = self._rereading.get(tp)
            if reread is None:
                reread = self._rereading[tp] = _Rereading(position(tp))
            reread.branches[key] = offset
            moves[tp] = min(reread.branches.values())
        self._released.clear()
        return moves

    def wanted(self, tp: TopicPartition, offset: int, key: BranchKey | None) -> bool:
        """Whether a fetched record is new to the worker (`key` None: it does not decode)."""
        reread = self._rereading.get(tp)
        if reread is None:
            return True
        if offset >= reread.upto:
            del self._rereading[tp]
            return True
        start = None if key is None else reread.branches.get(key)
        if key is None or start is None or offset < start:
            return False
        reread.branches[key] = offset + 1
        return True

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Revoked partitions: their next owner reads the waiting work from the committed offsets."""
        gone = set(tps)
        self._waiting = {k: v for k, v in self._waiting.items() if v[0] not in gone}
        self._released &= set(self._waiting)
        for tp in gone:
            self._rereading.pop(tp, None)
