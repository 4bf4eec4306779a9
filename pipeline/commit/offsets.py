"""Which branch-work offsets a partition may commit: everything before its oldest unsettled record."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.log.api import TopicPartition

__all__ = ["OffsetBook"]


class OffsetBook:
    """Tracks records handed to branch workers until they are settled (pushed or proved no-ops).

    Several branches share a partition, so a partition's committable offset is its oldest record
    any branch still holds; records arrive in offset order, so a dict keeps them sorted.
    """

    __slots__ = ("_committed", "_next", "_open")

    def __init__(self) -> None:
        self._open: dict[TopicPartition, dict[int, None]] = {}
        self._next: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    def received(self, tp: TopicPartition, offset: int) -> None:
        self._open.setdefault(tp, {})[offset] = None
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def settle(self, tp: TopicPartition, offset: int) -> None:
        held = self._open.get(tp)
        if held is not None:
            held.pop(offset, None)

    def committable(self, tp: TopicPartition) -> int | None:
        """The next offset the group may commit for `tp` (None before any record was received)."""
        held = self._open.get(tp)
        if held:
            return next(iter(held))
        return self._next.get(tp)

    def next_offset(self, tp: TopicPartition) -> int:
        """The offset after the last record received from `tp` (0 before any)."""
        return self._next.get(tp, 0)

    def unsettled(self, tp: TopicPartition) -> int:
        return len(self._open.get(tp, ()))

    def due(
        self,
        assigned: set[TopicPartition],
        moved_on: Callable[[dict[TopicPartition, int]], dict[TopicPartition, int]] | None = None,
        quiet: dict[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, int]:
        """Offsets that moved since the last commit, for assigned partitions only.

        `moved_on` is the group member's `committable`: it moves an offset past the transaction
        markers that follow the last record. The member learns of a marker only on a later fetch,
        so a partition whose records are all settled can still become due without any new record.
        `quiet` is the member's `quiet_positions`: a partition that gave this worker no record at
        all may still have a marker to commit past, left by its previous owner.
        """
        offsets: dict[TopicPartition, int] = {}
        for tp in assigned:
            offset = self.committable(tp)
            if offset is not None:
                offsets[tp] = offset
            elif quiet is not None and tp in quiet:
                offsets[tp] = quiet[tp]
        if moved_on is not None:
            offsets = moved_on(offsets)
        return {tp: offset for tp, offset in offsets.items() if offset > self._committed.get(tp, -1)}

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        self._committed.update(offsets)

    def forget(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self._open.pop(tp, None)
            self._next.pop(tp, None)
            self._committed.pop(tp, None)
