"""Lag monitor footprint as an operator sees it: RSS of `reverser run` with 200 groups x 10 partitions.

Two `reverser run` processes against the same real Kafka broker: one with only the lag monitor
enabled, one with nothing enabled (idle: same interpreter, imports, log client and ops server).
The monitor's own memory is the difference of their resident set sizes after the monitor has
polled for a while. The issue's reference is Burrow 1.9.5 at 28 MiB RSS for the same load;
Burrow cannot run here (no Go release download), so that figure is quoted, not measured.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from bench.bench_log import kafka_bootstrap
from tests.support.net import free_port

GROUPS = 200
PARTITIONS = 10
TOPICS = 20
COMMITS_PER_GROUP = 3
POLL_INTERVAL_S = 2.0
SETTLE_S = 40.0
SAMPLES = 5
BURROW_RSS_MIB = 28.0  # from the issue: Burrow 1.9.5 with the same groups and partitions


async def _load(bootstrap: str, prefix: str) -> None:
    """Topics with records, and GROUPS groups each committing a few times on one topic's partitions."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}.t{t}", PARTITIONS, 1) for t in range(TOPICS)])
    finally:
        await admin.close()
    for g in range(GROUPS):
        topic = f"{prefix}.t{g % TOPICS}"
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=f"{prefix}-g{g}", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            for step in range(COMMITS_PER_GROUP):
                await consumer.commit(dict.fromkeys(tps, step))
        finally:
            await consumer.stop()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def _run(bootstrap: str, prefix: str, workdir: Path, lag: bool) -> float:
    """Start `reverser run`, wait until ready, let the monitor poll, and return its RSS in MiB."""
    port = free_port()
    config = workdir / f"config-{'lag' if lag else 'idle'}.yaml"
    config.write_text(
        f"workdir: {workdir / ('lag' if lag else 'idle')}\n"
        f"log: {{backend: kafka, bootstrap_servers: '{bootstrap}', topic_prefix: {prefix}}}\n"
        f"metrics: {{addr: '127.0.0.1:{port}'}}\n"
        "audit: {enabled: false}\n"
        f"lag: {{enabled: {str(lag).lower()}, poll_interval_s: {POLL_INTERVAL_S}, allow: ['^{prefix}-']}}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("reverser run did not become ready")
            time.sleep(0.5)
        time.sleep(SETTLE_S)
        samples = []
        for _ in range(SAMPLES):
            samples.append(_rss_mib(process.pid))
            time.sleep(POLL_INTERVAL_S)
        if lag:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v3/kafka/local/consumer", timeout=5) as r:
                listed = r.read().decode()
            seen = listed.count(f"{prefix}-g")
            if seen != GROUPS:
                raise RuntimeError(f"the monitor lists {seen} of {GROUPS} groups")
        return max(samples)
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # coordinator retries while groups appear
    prefix = f"benchrss{uuid.uuid4().hex[:6]}"
    with kafka_bootstrap() as bootstrap, tempfile.TemporaryDirectory(prefix="bench-lag-rss-") as tmp:
        asyncio.run(_load(bootstrap, prefix))
        idle = _run(bootstrap, prefix, Path(tmp), lag=False)
        with_lag = _run(bootstrap, prefix, Path(tmp), lag=True)
    own = with_lag - idle
    print(f"groups x partitions         : {GROUPS} x {PARTITIONS} = {GROUPS * PARTITIONS}")
    print(f"reverser run, idle          : {idle:.1f} MiB RSS")
    print(f"reverser run, lag monitor   : {with_lag:.1f} MiB RSS")
    print(
        f"monitor's own memory        : {own:.1f} MiB = {own / BURROW_RSS_MIB:.2f} x Burrow's "
        f"{BURROW_RSS_MIB:.0f} MiB (quoted from the issue, not measured here)"
    )


if __name__ == "__main__":
    main()
