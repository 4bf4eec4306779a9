"""Decoding `__consumer_offsets` records, built here byte by byte from Kafka's message formats.

The Kafka monitor tests exercise the same decoder on records the real broker wrote; these cover
the versions and the malformed inputs a single broker version does not produce.
"""

from __future__ import annotations

import struct

import pytest
from prometheus_client import REGISTRY

from pipeline.config import Settings
from pipeline.lag.offsets_topic import (
    OFFSETS_TOPIC,
    ConsumerOffsetsFeed,
    decode_commit,
    decode_key,
    decode_value,
)
from pipeline.log.api import Log, Record, TopicPartition, TopicSpec


def string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def compact_string(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) + 1 < 0x80
    return bytes([len(raw) + 1]) + raw


def commit_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return struct.pack(">h", version) + string(group) + string(topic) + struct.pack(">i", partition)


def value(version: int, offset: int, commit_ms: int, metadata: str = "m") -> bytes:
    head = struct.pack(">hq", version, offset)
    if version in (0, 2):
        return head + string(metadata) + struct.pack(">q", commit_ms)
    if version == 1:
        return head + string(metadata) + struct.pack(">qq", commit_ms, commit_ms + 86_400_000)
    if version == 3:
        return head + struct.pack(">i", 7) + string(metadata) + struct.pack(">q", commit_ms)
    return head + struct.pack(">i", 7) + compact_string(metadata) + struct.pack(">q", commit_ms) + b"\x00"


def record(key: bytes | None, val: bytes | None) -> Record:
    return Record(OFFSETS_TOPIC, 3, 41, 0, key, val)


@pytest.mark.parametrize("version", [0, 1])
def test_offset_commit_keys(version: int) -> None:
    assert decode_key(commit_key("g", "orders", 5, version)) == ("g", TopicPartition("orders", 5))


def test_group_metadata_keys_are_not_commits() -> None:
    assert decode_key(struct.pack(">h", 2) + string("g")) is None


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_values(version: int) -> None:
    decoded = decode_value(value(version, 1234, 1_700_000_000_123))
    assert (decoded.offset, decoded.commit_ms) == (1234, 1_700_000_000_123)


def test_a_commit_record_becomes_a_commit() -> None:
    commit = decode_commit(record(commit_key("g", "t", 0), value(3, 9, 5000)))
    assert commit is not None
    assert (commit.group, commit.tp) == ("g", TopicPartition("t", 0))
    assert (commit.offset, commit.commit_ms) == (9, 5000)


def test_tombstones_and_metadata_records_are_skipped_silently() -> None:
    before = REGISTRY.get_sample_value("reverser_lag_undecodable_offset_records_total") or 0.0
    assert decode_commit(record(commit_key("g", "t", 0), None)) is None
    assert decode_commit(record(struct.pack(">h", 2) + string("g"), b"\x00\x03")) is None
    assert decode_commit(record(None, b"x")) is None
    assert REGISTRY.get_sample_value("reverser_lag_undecodable_offset_records_total") == before


@pytest.mark.parametrize(
    ("key", "val"),
    [
        (commit_key("g", "t", 0), b"\x00\x03\x00"),  # truncated value
        (commit_key("g", "t", 0), struct.pack(">hq", 9, 1) + b"\x00" * 16),  # unknown version
        (struct.pack(">h", 1) + struct.pack(">h", 40) + b"short", value(3, 1, 1)),  # truncated key
        (struct.pack(">h", 1) + string("g") + struct.pack(">h", 2) + b"\xff\xfe" + bytes(4), value(3, 1, 1)),
    ],
    ids=["truncated-value", "unknown-version", "truncated-key", "bad-utf8"],
)
def test_malformed_records_are_counted_not_raised(key: bytes, val: bytes) -> None:
    before = REGISTRY.get_sample_value("reverser_lag_undecodable_offset_records_total") or 0.0
    assert decode_commit(record(key, val)) is None
    assert REGISTRY.get_sample_value("reverser_lag_undecodable_offset_records_total") == before + 1


@pytest.mark.kafka
async def test_feed_reads_real_commits_and_thins_them(kafka_log: Log, kafka_settings: Settings) -> None:
    group = f"{kafka_settings.log.topic_prefix}-feed"
    topic = f"{kafka_settings.log.topic_prefix}.feed"
    await kafka_log.create_topics([TopicSpec(topic, 1)])
    tp = TopicPartition(topic, 0)
    for offset in (1, 2, 3, 4):
        await kafka_log.commit_group_offsets(group, {tp: offset})

    def selected(name: str) -> bool:
        return name == group

    slots = ConsumerOffsetsFeed(kafka_log, min_distance_ms=3_600_000)
    newest = ConsumerOffsetsFeed(kafka_log, keep=2)
    try:
        (merged,) = await slots.drain(selected)
        assert (merged.group, merged.tp, merged.offset) == (group, tp, 4)
        assert [c.offset for c in await newest.drain(selected)] == [3, 4]
        await kafka_log.commit_group_offsets(group, {tp: 9})
        assert [c.offset for c in await newest.drain(selected)] == [9]
    finally:
        await slots.close()
        await newest.close()
