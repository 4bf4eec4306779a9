"""Reading the dead-letter topic whole, into a `Book` (the I/O half of `pipeline.deadletter.book`)."""

from __future__ import annotations

from pipeline.deadletter.book import Book, book_of
from pipeline.log.api import Log, Record
from pipeline.log.scan import extent_of, read_to_end

__all__ = ["read_book"]

FETCH_TIMEOUT_MS = 500
# Fetches in a row that move no partition closer to its end before the read gives up (30 s): a
# replay must see every receipt, so a topic read short is an error, never a shorter book.
STALL_ROUNDS = 60


async def _read_all(log: Log, topic: str) -> tuple[list[Record], int]:
    records: list[Record] = []
    lost = 0
    # readers move past transaction markers (every replay commits one), so the read ends
    chunks = read_to_end(
        log, await extent_of(log, topic), timeout_ms=FETCH_TIMEOUT_MS, stall_fetches=STALL_ROUNDS
    )
    async for chunk in chunks:
        lost += sum(gap.lost for gap in chunk.gaps)
        records.extend(chunk.records)
    records.sort(key=lambda r: (r.partition, r.offset))
    return records, lost


async def read_book(log: Log, topic: str) -> Book:
    """Read the dead-letter topic from its log-start to its current end (committed records only)."""
    records, lost = await _read_all(log, topic)
    return book_of(topic, records, lost)
