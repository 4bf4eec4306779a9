"""The first-read contract over a compacted topic: every current record, then `initialized`, then changes.

A reconciler that starts cold needs the whole current world before it can act on changes (the
change-stream contract of a state table). On a keyed, compacted topic that world is the newest
record per key, with tombstones (records without a value) removing their key. `TableReader`
captures the log-end offset of every partition when it opens, reads each partition from its
log-start up to that offset, collapses duplicates by key to the newest (compaction may not have
run yet, or not reached the newest segments), drops tombstoned keys, hands out the result, and
from then on returns every later record as a change, in log order per partition.

It is written against the `Log` interface only, so it behaves the same on every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from pipeline.log.api import Gap, Log, Reader, Record, TopicPartition
from pipeline.log.scan import extent_of, read_until

__all__ = ["INITIALIZED", "Change", "Initialized", "TableEvent", "TableReader", "TableSnapshot"]

FETCH_TIMEOUT_MS = 500
FETCH_MAX_RECORDS = 2000


@dataclass(frozen=True, slots=True)
class Change:
    """One record of the table: `record.value is None` means the key was removed (a tombstone)."""

    key: bytes
    record: Record

    @property
    def removed(self) -> bool:
        return self.record.value is None


@dataclass(frozen=True, slots=True)
class Initialized:
    """Marks the end of the first read: every change after it happened after the reader opened."""


INITIALIZED = Initialized()
TableEvent = Change | Initialized


@dataclass(slots=True)
class TableSnapshot:
    """The first read: the newest live record per key, and the end offsets it was read up to."""

    records: dict[bytes, Record] = field(default_factory=dict)
    ends: dict[TopicPartition, int] = field(default_factory=dict)
    # Records read (before collapsing), and ranges a retention policy deleted under the reader.
    read: int = 0
    gaps: list[Gap] = field(default_factory=list)


class TableReader:
    """Reads one keyed topic as a table; `open`, then `first_read`, then `changes` (or iterate `events`).

    `keys` narrows the table (for example to one target's key prefix); records without a key are
    not part of any table and are skipped. `progress(done, total)` is called after every fetch of
    the first read with the records read and the records there were to read at open.
    """

    def __init__(
        self,
        log: Log,
        topic: str,
        *,
        keys: Callable[[bytes], bool] | None = None,
        progress: Callable[[int, int], object] | None = None,
    ) -> None:
        self._log = log
        self._topic = topic
        self._keys = keys
        self._progress = progress
        self._reader: Reader | None = None
        self._ends: dict[TopicPartition, int] = {}
        self._starts: dict[TopicPartition, int] = {}
        self._initialized = False
        self._early: list[Record] = []

    @property
    def total(self) -> int:
        """Records between log-start and the captured end offsets (an upper bound of the first read)."""
        return sum(self._ends[tp] - self._starts[tp] for tp in self._ends)

    async def open(self) -> None:
        """Capture the end offsets: the first read covers exactly what was on the log at this point."""
        extent = await extent_of(self._log, self._topic)
        self._starts, self._ends = extent.starts, extent.ends
        self._reader = self._log.reader()
        await self._reader.assign(dict(self._starts))

    async def first_read(self) -> TableSnapshot:
        """Every current record up to the end offsets captured at `open`."""
        reader = self._require_open()
        if self._initialized:
            raise RuntimeError("first_read was already done; read changes now")
        snapshot = TableSnapshot(ends=dict(self._ends))
        total = self.total
        chunks = read_until(reader, self._ends, timeout_ms=FETCH_TIMEOUT_MS, max_records=FETCH_MAX_RECORDS)
        wanted, newest = self._keys, snapshot.records
        async for chunk in chunks:
            snapshot.gaps.extend(chunk.gaps)
            # appended after open: the first changes, not part of the first read
            self._early.extend(chunk.later)
            snapshot.read += len(chunk.records)
            # the per-record loop of every first read: `_wanted` inlined
            for record in chunk.records:
                key = record.key
                if key is None or (wanted is not None and not wanted(key)):
                    continue
                if record.value is None:
                    newest.pop(key, None)
                else:
                    newest[key] = record
            if self._progress is not None:
                self._progress(snapshot.read, total)
        self._initialized = True
        return snapshot

    async def changes(self, timeout_ms: int = 1000) -> list[Change]:
        """Records appended after the first read's end offsets, in log order per partition."""
        reader = self._require_open()
        if not self._initialized:
            raise RuntimeError("changes come after first_read")
        if self._early:
            records, self._early = self._early, []
        else:
            records = (await reader.fetch(timeout_ms=timeout_ms, max_records=FETCH_MAX_RECORDS)).records
        return [Change(r.key, r) for r in records if self._wanted(r) and r.key is not None]

    async def events(self, timeout_ms: int = 1000) -> AsyncIterator[TableEvent]:
        """The contract as one stream: current records (key order), `INITIALIZED`, then changes forever."""
        snapshot = await self.first_read()
        for key in sorted(snapshot.records):
            yield Change(key, snapshot.records[key])
        yield INITIALIZED
        while True:
            for change in await self.changes(timeout_ms):
                yield change

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    def _wanted(self, record: Record) -> bool:
        return record.key is not None and (self._keys is None or self._keys(record.key))

    def _require_open(self) -> Reader:
        if self._reader is None:
            raise RuntimeError("open the table reader first")
        return self._reader
