"""Transactions and fencing through the log seam, on the embedded log and on a real Kafka broker.

What the stages rely on: a transaction's records and group offsets become visible together or not
at all; starting a producer with a transactional id fences every older producer of that id (its
writes fail with `FencedError`, for good, and nothing it sends afterwards is read); readers and
group members never return records of aborted transactions, and a group that has read everything
commits offsets with no lag left behind the transaction markers.
"""

from __future__ import annotations

import pytest

from pipeline.config import Settings
from pipeline.log import (
    FencedError,
    GroupOffsets,
    Log,
    PendingRecord,
    Record,
    RecordTooLargeError,
    TopicPartition,
)
from tests.conformance.test_log_conformance import consume, make_topic, read_all
from tests.support.wait import wait_for


async def _offsets_are(log: Log, group: str, expected: dict[TopicPartition, int]) -> bool:
    return await log.group_offsets(group) == expected


def values(records: list[Record]) -> list[bytes | None]:
    return [r.value for r in records]


async def test_a_transaction_writes_records_and_group_offsets_together(
    any_log: Log, settings: Settings
) -> None:
    source = await make_topic(any_log, settings, "txn-in", partitions=1)
    out = await make_topic(any_log, settings, "txn-out", partitions=2)
    side = await make_topic(any_log, settings, "txn-side", partitions=1)
    group = f"{settings.log.topic_prefix}-txn"
    tp_in = TopicPartition(source, 0)
    producer = any_log.transactional_producer(f"{settings.log.topic_prefix}-p")
    await producer.start()
    try:
        results = await producer.commit(
            {
                out: [PendingRecord(b"a", key=b"k1", partition=0), PendingRecord(b"b", partition=1)],
                side: [PendingRecord(b"c")],
            },
            GroupOffsets(group, {tp_in: 7}),
        )
        assert [(r.topic, r.partition) for r in results] == [
            (out, 0),
            (out, 1),
            (side, 0),
        ]
        # Kafka writes the commit markers (into __consumer_offsets too) after EndTxn returns, so the
        # transaction's offsets become visible to a plain offset fetch shortly after, not at once.
        await wait_for(
            lambda: _offsets_are(any_log, group, {tp_in: 7}), "the transaction's group offsets", timeout_s=60
        )
        again = await producer.commit({out: [PendingRecord(b"d", partition=1)]})
        assert again[0].offset > results[1].offset
    finally:
        await producer.close()
    ends = await any_log.end_offsets([TopicPartition(out, 1), TopicPartition(side, 0)])
    assert values(await read_all(any_log, TopicPartition(out, 1), 0, ends[TopicPartition(out, 1)])) == [
        b"b",
        b"d",
    ]
    assert values(await read_all(any_log, TopicPartition(side, 0), 0, ends[TopicPartition(side, 0)])) == [
        b"c"
    ]


async def test_a_rejected_transaction_leaves_nothing_behind(any_log: Log, settings: Settings) -> None:
    out = await make_topic(any_log, settings, "txn-reject", partitions=1, max_message_bytes=2048)
    tp = TopicPartition(out, 0)
    group = f"{settings.log.topic_prefix}-reject"
    producer = any_log.transactional_producer(f"{settings.log.topic_prefix}-r")
    await producer.start()
    try:
        with pytest.raises(RecordTooLargeError):
            await producer.commit(
                {out: [PendingRecord(b"small"), PendingRecord(b"x" * 4096)]}, GroupOffsets(group, {tp: 1})
            )
        assert await any_log.group_offsets(group) == {}
        # the producer is still usable after a rejected transaction
        await producer.commit({out: [PendingRecord(b"after")]})
    finally:
        await producer.close()
    end = (await any_log.end_offsets([tp]))[tp]
    assert values(await read_all(any_log, tp, 0, end)) == [b"after"]


async def test_a_newer_producer_fences_the_older_one_for_good(any_log: Log, settings: Settings) -> None:
    out = await make_topic(any_log, settings, "txn-fence", partitions=1)
    tp = TopicPartition(out, 0)
    transactional_id = f"{settings.log.topic_prefix}.watch.src"
    old = any_log.transactional_producer(transactional_id)
    await old.start()
    await old.commit({out: [PendingRecord(b"old-1")]})
    new = any_log.transactional_producer(transactional_id)
    await new.start()
    try:
        with pytest.raises(FencedError):
            await old.commit({out: [PendingRecord(b"zombie-1")]})
        with pytest.raises(FencedError):
            await old.commit({out: [PendingRecord(b"zombie-2")]})
        await new.commit({out: [PendingRecord(b"new-1")]})
        other = any_log.transactional_producer(f"{settings.log.topic_prefix}.watch.other")
        await other.start()
        await other.commit({out: [PendingRecord(b"other-1")]})
        await other.close()
    finally:
        await new.close()
        await old.close()
    end = (await any_log.end_offsets([tp]))[tp]
    assert values(await read_all(any_log, tp, 0, end)) == [b"old-1", b"new-1", b"other-1"]


async def three_transactions(log: Log, settings: Settings, name: str) -> tuple[str, TopicPartition]:
    """A one-partition topic holding records b"0", b"1", b"2", each in a transaction of its own."""
    out = await make_topic(log, settings, f"txn-{name}", partitions=1)
    producer = log.transactional_producer(f"{settings.log.topic_prefix}-{name}")
    await producer.start()
    try:
        for i in range(3):
            await producer.commit({out: [PendingRecord(f"{i}".encode())]})
    finally:
        await producer.close()
    return out, TopicPartition(out, 0)


async def test_a_group_that_read_everything_commits_without_lag(any_log: Log, settings: Settings) -> None:
    out, tp = await three_transactions(any_log, settings, "lag")
    group = f"{settings.log.topic_prefix}-lag-group"
    member = any_log.group_consumer(group, [out])
    await member.start()
    try:

        async def fetch() -> list[Record]:
            return (await member.fetch(timeout_ms=500)).records

        records = await consume(fetch, 3)
        assert values(records) == [b"0", b"1", b"2"]
        await member.commit({tp: records[-1].offset + 1})
        assert member.committable({tp: records[0].offset + 1}) == {tp: records[0].offset + 1}
    finally:
        await member.close()
    assert await any_log.group_offsets(group) == await any_log.end_offsets([tp])


async def test_a_new_owner_with_no_record_to_read_commits_past_the_marker(
    any_log: Log, settings: Settings
) -> None:
    """The group's offset sits one short of the last transaction's marker (its previous owner was
    killed before it committed past it). The next owner gets no record from the partition, yet its
    quiet position says where it read to, and committing that leaves the group without lag."""
    out, tp = await three_transactions(any_log, settings, "quiet")
    end = (await any_log.end_offsets([tp]))[tp]
    last_record = (await read_all(any_log, tp, 0, end))[-1].offset
    group = f"{settings.log.topic_prefix}-quiet-group"
    await any_log.commit_group_offsets(group, {tp: last_record + 1})
    member = any_log.group_consumer(group, [out])
    await member.start()
    try:
        assert (await member.fetch(timeout_ms=300)).records == []

        async def read_to_end() -> bool:
            assert (await member.fetch(timeout_ms=300)).records == []
            return member.quiet_positions().get(tp) == end

        # Kafka writes a marker after each transaction's records; the embedded log writes none,
        # so there its group is already at the end and nothing is quiet to commit.
        assert (last_record + 1 < end) == (settings.log.backend == "kafka")
        if last_record + 1 < end:
            await wait_for(read_to_end, "the member read past the last marker", timeout_s=30)
        await member.commit(member.quiet_positions())
        assert await any_log.group_offsets(group) == {tp: end}
        # A seek may go back to records: nothing is known of the partition until the next fetch.
        await member.seek(tp, last_record)
        assert tp not in member.quiet_positions()
        records = (await member.fetch(timeout_ms=2000)).records
        assert values(records) == [b"2"]
        assert tp not in member.quiet_positions()
    finally:
        await member.close()
