"""Kafka record-batch compression: bytes on the broker's disk and append rate per `log.compression`,
each as a ratio to uncompressed batches written in the same run to the same private broker.

Records are the corpus's `watch_event` records (see `bench_log`), appended in batches of 500 like the
router's hand-off. Needs a broker it starts itself (the segment files must be local), so it ignores
`KAFKA_BOOTSTRAP_SERVERS`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path

from bench.bench_log import BATCH, PARTITIONS, watch_events
from pipeline.codec import codec
from pipeline.config import Compression, LogSettings
from pipeline.log import PendingRecord, TopicSpec
from pipeline.log.kafka import KafkaLog

RECORDS = 20_000
CODECS = (Compression.NONE, Compression.LZ4, Compression.ZSTD)


async def append_all(
    bootstrap: str, compression: Compression, pending: list[PendingRecord]
) -> tuple[str, float]:
    """Append every record with `compression`; returns the topic and records per second."""
    log = KafkaLog(LogSettings(backend="kafka", bootstrap_servers=bootstrap, compression=compression))
    await log.start()
    try:
        topic = f"bench-{compression.value}-{uuid.uuid4().hex[:8]}"
        await log.create_topics([TopicSpec(topic, PARTITIONS, max_message_bytes=4 * 1024 * 1024)])
        started = time.perf_counter()
        for start in range(0, len(pending), BATCH):
            await log.append_many(topic, pending[start : start + BATCH])
        return topic, len(pending) / (time.perf_counter() - started)
    finally:
        await log.close()


def stored_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in data_dir.glob(f"{topic}-*/*.log"))


def main() -> None:
    from tests.integration.kafka.broker import KafkaBroker

    record_codec = codec("watch_event")
    payloads = [record_codec.encode(e) for e in watch_events(RECORDS)]
    pending = [
        PendingRecord(p, key=f"key-{i % 1000}".encode(), headers=(record_codec.header,))
        for i, p in enumerate(payloads)
    ]
    print(f"{RECORDS:,} watch_event records, {sum(map(len, payloads)) / RECORDS:,.0f} bytes each")
    with tempfile.TemporaryDirectory(prefix="bench-compression-") as workdir:
        broker = KafkaBroker(Path(workdir))
        broker.start()
        try:
            results = {}
            for compression in CODECS:
                topic, rate = asyncio.run(append_all(broker.bootstrap, compression, pending))
                results[compression] = (stored_bytes(broker.data_dir, topic), rate)
        finally:
            broker.stop()
    base_bytes, base_rate = results[Compression.NONE]
    for compression, (size, rate) in results.items():
        print(
            f"{compression.value:<5} {size:>12,} bytes on disk = {size / base_bytes:5.3f} x none   "
            f"append {rate:>9,.0f} rec/s = {rate / base_rate:5.3f} x none",
            flush=True,
        )
