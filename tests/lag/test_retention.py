"""A group whose committed offset fell below log-start: records lost are reported, lag stays sane.

Kafka truncates with the DeleteRecords admin call (what `kafka-delete-records.sh` does); the
embedded log is truncated by its own size retention with small segments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from pipeline.config import Settings
from pipeline.log.api import Log, PendingRecord, TopicPartition, TopicSpec
from pipeline.log.embedded import EmbeddedLog
from tests.lag.helpers import SkewedClock, make_topic, monitor_for, produce


@pytest.mark.kafka
async def test_kafka_records_deleted_before_consumption_are_reported_lost(
    kafka_log: Log, kafka_settings: Settings
) -> None:
    group = f"{kafka_settings.log.topic_prefix}-truncated"
    tp = await make_topic(kafka_log, kafka_settings, "truncated")
    await produce(kafka_log, tp, 20)
    await kafka_log.commit_group_offsets(group, {tp: 2})
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_settings.log.bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_records({KafkaTopicPartition(tp.topic, 0): RecordsToDelete(before_offset=12)})
    finally:
        await admin.close()
    monitor = monitor_for(kafka_log, [group], SkewedClock())
    try:
        snapshot = await monitor.poll()
    finally:
        await monitor.close()
    result = snapshot.group(group)
    assert result is not None
    (partition,) = result.partitions
    assert (partition.start, partition.end, partition.committed) == (12, 20, 2)
    assert partition.lost == 10
    assert partition.lag == 18
    assert result.total_lost == 10


async def test_embedded_records_deleted_by_retention_are_reported_lost(
    tmp_path: Path, embedded_settings: Settings
) -> None:
    log = EmbeddedLog(tmp_path / "small-segments", segment_bytes=300)
    await log.start()
    name = f"{embedded_settings.log.topic_prefix}.truncated"
    tp = TopicPartition(name, 0)
    group = f"{embedded_settings.log.topic_prefix}-truncated"
    monitor = monitor_for(log, [group], SkewedClock())
    try:
        await log.create_topics([TopicSpec(name, 1, retention_bytes=700)])
        await log.append_many(name, [PendingRecord(value=b"v" * 64, partition=0) for _ in range(30)])
        await log.commit_group_offsets(group, {tp: 2})
        log.enforce_retention()
        start = (await log.beginning_offsets([tp]))[tp]
        assert 2 < start < 30, "retention should have deleted some but not all segments"
        snapshot = await monitor.poll()
    finally:
        await monitor.close()
        await log.close()
    result = snapshot.group(group)
    assert result is not None
    (partition,) = result.partitions
    assert partition.start == start
    assert partition.lost == start - 2
    assert partition.lag == 28


@pytest.mark.kafka
async def test_kafka_deleted_topic_drops_its_partitions_not_the_poll(
    kafka_log: Log, kafka_settings: Settings
) -> None:
    group = f"{kafka_settings.log.topic_prefix}-two-topics"
    kept = await make_topic(kafka_log, kafka_settings, "kept")
    doomed = await make_topic(kafka_log, kafka_settings, "doomed")
    await produce(kafka_log, kept, 3)
    await produce(kafka_log, doomed, 3)
    await kafka_log.commit_group_offsets(group, {kept: 1, doomed: 1})
    monitor = monitor_for(kafka_log, [group], SkewedClock())
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_settings.log.bootstrap_servers)
    await admin.start()
    try:
        first = await monitor.poll()
        assert {p.topic for p in first.groups[0].partitions} == {kept.topic, doomed.topic}
        await admin.delete_topics([doomed.topic])
        snapshot = await monitor.poll()
    finally:
        await admin.close()
        await monitor.close()
    assert not snapshot.stale, snapshot.error
    result = snapshot.group(group)
    assert result is not None
    assert [(p.topic, p.lag) for p in result.partitions] == [(kept.topic, 2)]
