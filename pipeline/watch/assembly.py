"""A watch session's snapshot, assembled without I/O: epochs, chunk boundaries and the end marker.

A stream that (re)lists its objects writes them as one snapshot: `begin` (implicit in the epoch),
chunks of objects, then an end marker carrying the counts, so the commit worker can tell a
complete snapshot from one a crash cut short. Which objects share a chunk, when a chunk is cut,
what the end marker counts and which epoch a new snapshot gets are decisions about data only;
they live here and are tested without a cluster or a log. `WatchStream` feeds the objects in and
appends what comes out.
"""

from __future__ import annotations

from pipeline.codec.watch_event import SnapshotObject
from pipeline.log.api import PendingRecord
from pipeline.watch.records import RecordBuilder

__all__ = ["SnapshotAssembly", "next_epoch"]


def next_epoch(cursor_epoch: int | None, last_epoch: int, now_ms: int) -> int:
    """A snapshot epoch newer than any this stream (or an earlier process, via its cursor) used.

    The wall clock in milliseconds when it is ahead, so epochs stay comparable across restarts.
    """
    return max(max(cursor_epoch or 0, last_epoch) + 1, now_ms)


class SnapshotAssembly:
    """An in-progress snapshot: objects wait here until they fill a chunk of `builder.chunk_budget`."""

    __slots__ = ("_builder", "chunks", "epoch", "mode", "objects", "pending", "pending_bytes", "since")

    def __init__(self, epoch: int, mode: str, since: str, builder: RecordBuilder) -> None:
        self.epoch = epoch
        self.mode = mode
        # The cursor the stream had before this snapshot ("" without one): objects newer than it
        # changed while nothing was streaming, and are attributed like live events downstream.
        self.since = since
        self._builder = builder
        self.chunks = 0
        self.objects = 0
        self.pending: list[SnapshotObject] = []
        self.pending_bytes = 0

    def fits(self, item: SnapshotObject) -> bool:
        """Whether one object fits a chunk at all (else it is left out of the snapshot)."""
        return item.size_estimate <= self._builder.chunk_budget

    def add(self, item: SnapshotObject) -> list[PendingRecord]:
        """Take one object; returns the chunk records it pushed out (the pending ones, when full)."""
        out: list[PendingRecord] = []
        if self.pending_bytes + item.size_estimate > self._builder.chunk_budget:
            out = self.flush()
        self.pending.append(item)
        self.pending_bytes += item.size_estimate
        self.objects += 1
        return out

    def flush(self) -> list[PendingRecord]:
        """The pending objects as chunk records (more than one when the encoded record is too big)."""
        if not self.pending:
            return []
        records = self._builder.chunks(self.epoch, self.chunks, self.pending, self.since)
        self.chunks += len(records)
        self.pending = []
        self.pending_bytes = 0
        return records

    def end(self, resource_version: str) -> list[PendingRecord]:
        """The last chunk and the end marker with the snapshot's chunk and object counts."""
        records = self.flush()
        records.append(self._builder.end(self.epoch, self.chunks, self.objects, resource_version, self.since))
        return records
