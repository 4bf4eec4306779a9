"""The first-read contract (`pipeline.log.table.TableReader`) on both backends.

A compacted topic read as a table must give the newest value per key with tombstoned keys gone,
whether or not compaction has run, then `INITIALIZED`, then exactly the records appended after
the reader opened.
"""

from __future__ import annotations

import asyncio

from pipeline.config import Settings
from pipeline.log import Log, PendingRecord, TopicPartition
from pipeline.log.table import INITIALIZED, Change, TableEvent, TableReader
from tests.conformance.test_log_conformance import age_out, make_topic, read_all


async def _workload(log: Log, topic: str) -> dict[bytes, bytes]:
    """Three rounds of updates to 8 keys, 3 of them deleted and one re-created: the expected table."""
    keys = [f"t/apps/deployments/ns/obj-{k}".encode() for k in range(8)]
    for version in range(3):
        await log.append_many(topic, [PendingRecord(f"v{version}".encode(), key=k) for k in keys])
        await asyncio.sleep(0.3)  # let segment.ms pass so Kafka can roll and clean older segments
    await log.append_many(topic, [PendingRecord(None, key=k) for k in keys[:3]])
    await log.append(topic, b"again", key=keys[0])
    expected = {k: b"v2" for k in keys[3:]}
    expected[keys[0]] = b"again"
    return expected


async def _first_read(log: Log, topic: str, **options: object) -> dict[bytes, bytes | None]:
    table = TableReader(log, topic, **options)  # type: ignore[arg-type]
    await table.open()
    try:
        snapshot = await table.first_read()
    finally:
        await table.close()
    return {k: r.value for k, r in snapshot.records.items()}


async def test_first_read_collapses_duplicates_and_drops_tombstones_before_compaction(
    any_log: Log, settings: Settings
) -> None:
    topic = await make_topic(any_log, settings, "table-dirty", partitions=3, cleanup_policy="compact")
    expected = await _workload(any_log, topic)
    assert await _first_read(any_log, topic) == expected


async def test_first_read_is_the_same_after_compaction(any_log: Log, settings: Settings) -> None:
    topic = await make_topic(
        any_log, settings, "table-clean", partitions=1, cleanup_policy="compact", segment_ms=100
    )
    expected = await _workload(any_log, topic)
    await any_log.append(topic, b"filler", key=b"filler")
    expected[b"filler"] = b"filler"
    tp = TopicPartition(topic, 0)
    end = (await any_log.end_offsets([tp]))[tp]

    async def compacted() -> bool:
        return len(await read_all(any_log, tp, 0, end)) < end

    await age_out(any_log, compacted, "compaction to drop superseded values")
    assert await _first_read(any_log, topic) == expected


async def test_key_filter_reads_one_target(any_log: Log, settings: Settings) -> None:
    topic = await make_topic(any_log, settings, "table-filter", partitions=2, cleanup_policy="compact")
    await any_log.append_many(
        topic,
        [
            PendingRecord(b"a", key=b"one/x"),
            PendingRecord(b"b", key=b"two/x"),
            PendingRecord(b"c", key=b"one/y"),
            PendingRecord(None, key=b"two/x"),
        ],
    )
    got = await _first_read(any_log, topic, keys=lambda key: key.startswith(b"one/"))
    assert got == {b"one/x": b"a", b"one/y": b"c"}


async def test_events_are_the_first_read_then_initialized_then_later_changes(
    any_log: Log, settings: Settings
) -> None:
    topic = await make_topic(any_log, settings, "table-live", partitions=2, cleanup_policy="compact")
    await any_log.append_many(
        topic, [PendingRecord(b"1", key=b"a"), PendingRecord(b"2", key=b"a"), PendingRecord(b"x", key=b"b")]
    )
    table = TableReader(any_log, topic)
    await table.open()
    # appended after open: a change, never part of the first read
    await any_log.append(topic, b"3", key=b"a")
    await any_log.append(topic, None, key=b"b")
    seen: list[TableEvent] = []
    try:
        async for event in table.events(timeout_ms=500):
            seen.append(event)
            if sum(isinstance(e, Change) for e in seen) == 4:
                break
    finally:
        await table.close()
    assert isinstance(seen[2], type(INITIALIZED))
    first = [(e.key, e.record.value) for e in seen[:2] if isinstance(e, Change)]
    assert first == [(b"a", b"2"), (b"b", b"x")]
    later = sorted((e.key, e.record.value, e.removed) for e in seen[3:] if isinstance(e, Change))
    assert later == [(b"a", b"3", False), (b"b", None, True)]


async def test_first_read_of_an_empty_topic_is_empty_and_initializes(
    any_log: Log, settings: Settings
) -> None:
    topic = await make_topic(any_log, settings, "table-empty", partitions=2, cleanup_policy="compact")
    table = TableReader(any_log, topic)
    await table.open()
    try:
        snapshot = await table.first_read()
        assert snapshot.records == {}
        assert await table.changes(timeout_ms=100) == []
        await any_log.append(topic, b"v", key=b"k")
        changes: list[Change] = []
        for _ in range(40):
            changes += await table.changes(timeout_ms=250)
            if changes:
                break
        assert [(c.key, c.record.value) for c in changes] == [(b"k", b"v")]
    finally:
        await table.close()
