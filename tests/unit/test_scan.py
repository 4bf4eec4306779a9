"""`pipeline.log.scan`: reading a topic up to the end offsets captured when the read began, on a
real embedded log (temporary directory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pipeline.log import LogUnavailableError, PendingRecord, TopicPartition, TopicSpec
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.scan import Extent, extent_of, read_to_end

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    embedded = EmbeddedLog(tmp_path / "log")
    await embedded.start()
    try:
        await embedded.create_topics([TopicSpec(TOPIC, 1)])
        await embedded.append_many(TOPIC, [PendingRecord(b"v%d" % i, key=b"k") for i in range(5)])
        yield embedded
    finally:
        await embedded.close()


async def test_a_read_to_end_stops_at_the_extent_and_hands_later_records_apart(log: EmbeddedLog) -> None:
    extent = await extent_of(log, TOPIC)
    await log.append_many(TOPIC, [PendingRecord(b"late", key=b"k")])
    below: list[bytes] = []
    later: list[bytes] = []
    async for chunk in read_to_end(log, extent, timeout_ms=0):
        below += [r.value or b"" for r in chunk.records]
        later += [r.value or b"" for r in chunk.later]
    assert below == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert later in ([], [b"late"])


async def test_a_read_that_cannot_reach_its_end_raises_naming_the_partition(log: EmbeddedLog) -> None:
    """An end the reader can never reach (as with a partition whose leader is gone) is an error
    after `stall_fetches` fetches that moved nothing, never a read that ends short."""
    unreachable = Extent(starts={TP: 0}, ends={TP: 8})
    seen: list[bytes] = []

    async def read() -> None:
        async for chunk in read_to_end(log, unreachable, timeout_ms=0, stall_fetches=3):
            seen.extend(r.value or b"" for r in chunk.records)

    with pytest.raises(LogUnavailableError, match=r"stalled before the end \(.*at 5 of 8\)"):
        await read()
    assert seen == [b"v0", b"v1", b"v2", b"v3", b"v4"]


async def test_without_a_stall_bound_an_idle_bound_ends_the_read_quietly(log: EmbeddedLog) -> None:
    unreachable = Extent(starts={TP: 0}, ends={TP: 8})
    chunks = [chunk async for chunk in read_to_end(log, unreachable, timeout_ms=0, idle_fetches=3)]
    assert sum(len(c.records) for c in chunks) == 5
