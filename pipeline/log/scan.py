"""Reading a topic up to "today's end": the end offsets taken when the read began.

Loading state from a topic (watch cursors, a table's first read, a replay, the doctor's look at
the newest facts) means reading every partition from some start up to the end offsets it had
when the read began, while the topic may keep growing. `read_until` does that on an assigned
reader, `read_to_end` opens (and closes) the reader too; both hand the records out in chunks as
they are fetched, with the gaps retention made and any records appended after the end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pipeline.log.api import Gap, Log, LogUnavailableError, Reader, Record, TopicPartition

__all__ = ["Chunk", "Extent", "extent_of", "read_to_end", "read_until"]

FETCH_TIMEOUT_MS = 1000
FETCH_MAX_RECORDS = 1000


@dataclass(frozen=True, slots=True)
class Extent:
    """Where each partition of a topic started and ended at one moment."""

    starts: dict[TopicPartition, int]
    ends: dict[TopicPartition, int]

    @property
    def total(self) -> int:
        """Records between log-start and log-end (an upper bound: compaction may have removed some)."""
        return sum(end - self.starts[tp] for tp, end in self.ends.items())

    def positions(self, tail: int | None = None) -> dict[TopicPartition, int]:
        """Where to start reading the partitions that hold records: log-start, or `tail` before the end."""
        return {
            tp: self.starts[tp] if tail is None else max(self.starts[tp], end - tail)
            for tp, end in self.ends.items()
            if end > self.starts[tp]
        }


async def extent_of(log: Log, topic: str) -> Extent:
    """Log-start and log-end offsets of every partition of `topic`, now."""
    tps = [TopicPartition(topic, p) for p in range(await log.partitions_for(topic))]
    return Extent(await log.beginning_offsets(tps), await log.end_offsets(tps))


@dataclass(frozen=True, slots=True)
class Chunk:
    """One fetch: records below the end offsets, gaps, and records appended after the end."""

    records: list[Record]
    gaps: list[Gap] = field(default_factory=list)
    later: list[Record] = field(default_factory=list)


async def read_until(
    reader: Reader,
    ends: dict[TopicPartition, int],
    *,
    timeout_ms: int = FETCH_TIMEOUT_MS,
    max_records: int = FETCH_MAX_RECORDS,
    idle_fetches: int | None = None,
    stall_fetches: int | None = None,
) -> AsyncIterator[Chunk]:
    """Fetch from `reader` (assigned to `ends`' partitions) until every position reached its end.

    A partition is done once the reader's position is at its end offset, whether the last records
    were read or compaction removed them. `idle_fetches` bounds a best-effort read: it stops after
    that many fetches in a row brought nothing. `stall_fetches` bounds a read that must be whole:
    after that many fetches in a row that moved no unfinished partition, it raises
    LogUnavailableError naming where each partition stands, rather than end short.
    """
    remaining = {tp for tp, end in ends.items() if reader.position(tp) < end}
    # per record, a plain (topic, partition) pair: building a TopicPartition each time costs more
    # than the rest of the split
    end_of = {(tp.topic, tp.partition): end for tp, end in ends.items()}
    idle = 0
    stalled = 0
    while remaining:
        before = {tp: reader.position(tp) for tp in remaining}
        fetched = await reader.fetch(timeout_ms=timeout_ms, max_records=max_records)
        if idle_fetches is not None:
            idle = 0 if fetched.records or fetched.gaps else idle + 1
            if idle >= idle_fetches:
                return
        records: list[Record] = []
        later: list[Record] = []
        for record in fetched.records:
            end = end_of.get((record.topic, record.partition))
            (records if end is not None and record.offset < end else later).append(record)
        remaining = {tp for tp in remaining if reader.position(tp) < ends[tp]}
        if stall_fetches is not None:
            stalled = 0 if any(reader.position(tp) > at for tp, at in before.items()) else stalled + 1
            if stalled >= stall_fetches:
                where = ", ".join(f"{tp} at {reader.position(tp)} of {ends[tp]}" for tp in sorted(remaining))
                raise LogUnavailableError(f"read stalled before the end ({where})")
        yield Chunk(records, fetched.gaps, later)


async def read_to_end(
    log: Log,
    extent: Extent,
    *,
    tail: int | None = None,
    timeout_ms: int = FETCH_TIMEOUT_MS,
    max_records: int = FETCH_MAX_RECORDS,
    idle_fetches: int | None = None,
    stall_fetches: int | None = None,
) -> AsyncIterator[Chunk]:
    """Every record of `extent` (the last `tail` per partition, if set), on a reader of its own.

    The reader is closed when the iteration ends; a caller that may stop early wraps the
    iterator in `contextlib.aclosing` so that happens at once.
    """
    positions = extent.positions(tail)
    if not positions:
        return
    async with log.reader() as reader:
        await reader.assign(positions)
        chunks = read_until(
            reader,
            {tp: extent.ends[tp] for tp in positions},
            timeout_ms=timeout_ms,
            max_records=max_records,
            idle_fetches=idle_fetches,
            stall_fetches=stall_fetches,
        )
        async for chunk in chunks:
            yield chunk
