"""Compressed record batches on a real broker: written by our producers (plain and transactional),
read back by our reader, and decoded by Kafka's own `kafka.tools.DumpLogSegments` from the broker
jars straight off the segment files, which also shows the codec each batch was stored with."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from pipeline.config import Compression, LogSettings
from pipeline.log import PendingRecord, TopicPartition, TopicSpec
from pipeline.log.kafka import KafkaLog
from tests.conftest import unique_prefix
from tests.integration.kafka.broker import KafkaBroker, libs_dir

pytestmark = pytest.mark.kafka

RECORDS = 20


def payload(i: int) -> bytes:
    """A YAML-like value that compresses well, with a marker the dump must show verbatim."""
    return (f"marker-{i:03d} " + "metadata: {name: cm, namespace: shop}\n" * 20).encode()


def dump_segments(partition_dirs: list[Path]) -> dict[Path, str]:
    """Kafka's own dump of each partition's segment (deep iteration: every record, decompressed)."""
    segments = [min(d.glob("*.log")) for d in partition_dirs]
    result = subprocess.run(
        [
            "java",
            "-cp",
            f"{libs_dir()}/*",
            "kafka.tools.DumpLogSegments",
            "--deep-iteration",
            "--print-data-log",
            "--files",
            ",".join(map(str, segments)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    parts = re.split(r"^Dumping (\S+)$", result.stdout, flags=re.M)
    dumps = dict(zip(parts[1::2], parts[2::2], strict=True))
    return {d: dumps[str(segment)] for d, segment in zip(partition_dirs, segments, strict=True)}


async def write_and_read(broker: KafkaBroker, compression: Compression) -> tuple[str, list[bytes]]:
    settings = LogSettings(
        backend="kafka",
        bootstrap_servers=broker.bootstrap,
        topic_prefix=unique_prefix(),
        compression=compression,
    )
    topic = f"{settings.topic_prefix}.compressed"
    log = KafkaLog(settings)
    await log.start()
    try:
        await log.create_topics([TopicSpec(topic, 1)])
        plain = [PendingRecord(payload(i), key=b"k") for i in range(RECORDS // 2)]
        await log.append_many(topic, plain)
        producer = log.transactional_producer(f"{settings.topic_prefix}.tx")
        await producer.start()
        try:
            await producer.commit(
                {topic: [PendingRecord(payload(i), key=b"k") for i in range(RECORDS // 2, RECORDS)]}
            )
        finally:
            await producer.close()
        tp = TopicPartition(topic, 0)
        reader = log.reader()
        await reader.assign({tp: 0})
        values: list[bytes] = []
        try:
            while len(values) < RECORDS:
                fetched = await reader.fetch(timeout_ms=2000)
                assert fetched.records, f"only {len(values)} of {RECORDS} records came back"
                values.extend(r.value or b"" for r in fetched.records)
        finally:
            await reader.close()
    finally:
        await log.close()
    return topic, values


def test_batches_are_stored_compressed_and_read_back_by_us_and_by_kafka(own_broker: KafkaBroker) -> None:
    codecs = [Compression.ZSTD, Compression.LZ4, Compression.NONE]
    topics = {}
    for compression in codecs:
        topic, values = asyncio.run(write_and_read(own_broker, compression))
        assert values == [payload(i) for i in range(RECORDS)], compression
        topics[compression] = own_broker.data_dir / f"{topic}-0"

    dumps = dump_segments(list(topics.values()))
    for compression, partition_dir in topics.items():
        dump = dumps[partition_dir]
        lines = dump.splitlines()
        data_batches = [x for x in lines if x.startswith("baseOffset:") and "isControl: false" in x]
        assert len(data_batches) >= 2, dump  # the plain appends and the transaction
        stored = {re.findall(r"compresscodec: (\w+)", line)[0].lower() for line in data_batches}
        assert stored == {compression.value}, (compression, dump)
        for i in range(RECORDS):
            assert f"marker-{i:03d}" in dump, (compression, i)
