"""Burrow's v3 HTTP API on the real broker: `reverser run`'s metrics port and `reverser lag --serve`.

Responses are decoded with models written here from Burrow's API documentation (field names and
nesting as its wiki gives them, extra fields refused), not with the implementation's own models,
so a renamed or moved field fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel, ConfigDict

from pipeline.config import Settings
from pipeline.lag.component import build, ops_routes
from pipeline.log.api import Log, TopicPartition
from pipeline.service.app import Service
from tests.lag.helpers import lag_settings, make_topic, produce, run_cli
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.kafka

WAIT_S = 60.0


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Request(Doc):
    url: str
    host: str


class Offset(Doc):
    offset: int
    timestamp: int
    lag: int


class Partition(Doc):
    topic: str
    partition: int
    owner: str
    status: str
    start: Offset | None
    end: Offset | None
    current_lag: int
    complete: float


class GroupStatus(Doc):
    cluster: str
    group: str
    status: str
    complete: float
    partitions: list[Partition]
    partition_count: int
    maxlag: Partition | None
    totallag: int


class Envelope(Doc):
    error: bool
    message: str
    request: Request


class ClusterList(Envelope):
    clusters: list[str]


class ConsumerList(Envelope):
    consumers: list[str]


class TopicList(Envelope):
    topics: list[str]


class TopicDetail(Envelope):
    offsets: list[int]


class ConsumerStatus(Envelope):
    status: GroupStatus


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with session.get(url) as response:
        assert response.content_type == "application/json"
        body: dict[str, Any] = await response.json()
        return response.status, body


async def test_reverser_run_serves_burrow_endpoints(kafka_log: Log, kafka_settings: Settings) -> None:
    group = f"{kafka_settings.log.topic_prefix}-burrow"
    tp = await make_topic(kafka_log, kafka_settings, "burrow", partitions=2)
    other = TopicPartition(tp.topic, 1)
    await produce(kafka_log, tp, 20)
    await produce(kafka_log, other, 4)
    for offset in (10, 20):
        await kafka_log.commit_group_offsets(group, {tp: offset})
        await asyncio.sleep(0.6)
    settings = kafka_settings.model_copy(
        update={
            "lag": lag_settings(allow=[f"^{group}$"], cluster_name="prod-eu"),
            "metrics": kafka_settings.metrics.model_copy(update={"addr": "127.0.0.1:0"}),
        }
    )
    service = Service(settings, kafka_log, [build])
    await service.start()
    base = ""
    try:
        await wait_for(service.ready, "the lag monitor's first poll", timeout_s=WAIT_S)
        base = f"http://127.0.0.1:{service.metrics_port}/v3/kafka"
        async with aiohttp.ClientSession() as session:
            code, body = await get(session, base)
            clusters = ClusterList.model_validate(body)
            code_consumers, consumers = await get(session, f"{base}/prod-eu/consumer")
            code_lag, lag = await get(session, f"{base}/prod-eu/consumer/{group}/lag")
            code_status, status = await get(session, f"{base}/prod-eu/consumer/{group}/status")
            code_topics, topics = await get(session, f"{base}/prod-eu/topic")
            code_topic, topic = await get(session, f"{base}/prod-eu/topic/{tp.topic}")
            missing_cluster = await get(session, f"{base}/elsewhere/consumer")
            missing_group = await get(session, f"{base}/prod-eu/consumer/nobody-{group}/lag")
            missing_topic = await get(session, f"{base}/prod-eu/topic/nothing-{tp.topic}")
    finally:
        await service.stop()

    assert code == 200
    assert clusters.error is False
    assert clusters.clusters == ["prod-eu"]
    assert clusters.request.url == "/v3/kafka"

    assert code_consumers == 200
    assert ConsumerList.model_validate(consumers).consumers == [group]

    assert code_lag == 200
    doc = ConsumerStatus.model_validate(lag)
    assert doc.message == "consumer group status returned"
    assert (doc.status.cluster, doc.status.group, doc.status.status) == ("prod-eu", group, "OK")
    assert doc.status.partition_count == 2
    assert doc.status.totallag == 0 + 4
    first, second = doc.status.partitions
    assert (first.topic, first.partition, first.status, first.current_lag) == (tp.topic, 0, "OK", 0)
    assert first.start is not None
    assert first.end is not None
    # the window: commit 10 (10 behind the end of 20), then 20 (caught up), in commit-time order
    assert (first.start.offset, first.start.lag, first.end.offset, first.end.lag) == (10, 10, 20, 0)
    assert first.start.timestamp < first.end.timestamp
    assert first.complete == 0.2  # two of ten window entries
    # never committed: listed with what is unread, no window
    assert (second.partition, second.status, second.current_lag) == (1, "OK", 4)
    assert (second.start, second.end, second.complete) == (None, None, 0.0)
    assert doc.status.maxlag is not None
    assert doc.status.maxlag.partition == 1
    assert doc.status.complete == 0.0

    assert code_status == 200
    only_bad = ConsumerStatus.model_validate(status)
    assert only_bad.status.partitions == []  # /status lists only partitions that are not OK
    assert only_bad.status.partition_count == 2

    assert code_topics == 200
    assert TopicList.model_validate(topics).topics == [tp.topic]
    assert code_topic == 200
    assert TopicDetail.model_validate(topic).offsets == [20, 4]

    assert missing_cluster[0] == 404
    error = Envelope.model_validate(missing_cluster[1])
    assert error.error is True
    assert error.message == "cluster not found"
    assert missing_group[0] == 404
    not_found = ConsumerStatus.model_validate(missing_group[1])
    assert not_found.status.status == "NOTFOUND"
    assert not_found.status.partitions == []
    assert missing_topic[0] == 404
    assert Envelope.model_validate(missing_topic[1]).error is True


def test_burrow_api_can_be_turned_off(kafka_settings: Settings) -> None:
    off = kafka_settings.model_copy(update={"lag": lag_settings(burrow_api=False)})
    assert ops_routes(off, tuple) == []
    disabled = kafka_settings.model_copy(update={"lag": lag_settings(enabled=False)})
    assert ops_routes(disabled, tuple) == []
    assert ops_routes(kafka_settings, tuple) != []


def _consumer(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )


async def _read_and_commit(bootstrap: str, topic: str, group: str, read: int) -> None:
    """Another application's consumer (plain aiokafka): reads `read` records, commits, leaves."""
    consumer = _consumer(bootstrap, topic, group)
    await consumer.start()
    try:
        taken = 0
        while taken < read:
            batches = await consumer.getmany(timeout_ms=1000, max_records=read - taken)
            taken += sum(len(records) for records in batches.values())
        await consumer.commit()
    finally:
        await consumer.stop()


async def _keep_consuming(bootstrap: str, topic: str, group: str) -> None:
    """Another application's live consumer: reads whatever arrives and commits it, until cancelled."""
    consumer = _consumer(bootstrap, topic, group)
    await consumer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            if any(batches.values()):
                await consumer.commit()
    finally:
        await consumer.stop()


async def _produce(bootstrap: str, topic: str, count: int, start: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(start, start + count):
            await producer.send_and_wait(topic, f"order-{i}".encode(), partition=0)
    finally:
        await producer.stop()


async def test_reverser_lag_serve_on_a_cluster_of_other_applications(
    kafka_log: Log, kafka_settings: Settings, kafka_bootstrap: str
) -> None:
    """A foreign app's groups (plain aiokafka): a live one, a stopped one and a denied one.

    The live group keeps up (OK); the stopped one is 40 behind (STOP, group ERR) and over its
    lag-seconds limit once records keep arriving; the denied one is not read. Checked through
    Burrow's API and the cluster-wide summary metrics of `reverser lag --serve`.
    """
    prefix = kafka_settings.log.topic_prefix
    topic = (await make_topic(kafka_log, kafka_settings, "orders")).topic
    billing, audit, internal = f"{prefix}-billing", f"{prefix}-audit", f"{prefix}-internal"
    await _produce(kafka_bootstrap, topic, 50, start=0)
    await _read_and_commit(kafka_bootstrap, topic, audit, read=20)
    await _read_and_commit(kafka_bootstrap, topic, internal, read=5)
    live = asyncio.create_task(_keep_consuming(kafka_bootstrap, topic, billing))
    port = free_port()
    env = {
        **os.environ,
        "REVERSER_LOG__BOOTSTRAP_SERVERS": kafka_bootstrap,
        "REVERSER_LAG__POLL_INTERVAL_S": "0.5",
        "REVERSER_LAG__ALLOW": f'["^{prefix}-"]',
        "REVERSER_LAG__DENY": '["-internal$"]',
        "REVERSER_LAG__THRESHOLDS": '[{"group": "-audit$", "max_lag_s": 0.001}]',
    }
    process = subprocess.Popen(  # noqa: ASYNC220 - a long-running child, waited for off the loop
        [sys.executable, "-m", "pipeline.cli", "lag", "--serve", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def both_seen() -> bool:
                try:
                    _, body = await get(session, f"{base}/v3/kafka/local/consumer")
                except aiohttp.ClientError:
                    return False
                return sorted(body["consumers"]) == sorted([audit, billing])

            await wait_for(both_seen, "the standalone monitor to see the foreign groups", timeout_s=WAIT_S)
            # records keep arriving: the live group follows, the stopped one falls further behind
            await _produce(kafka_bootstrap, topic, 10, start=50)

            async def settled() -> bool:
                async with session.get(f"{base}/metrics") as response:
                    text = await response.text()
                return (
                    f'reverser_consumergroup_over_threshold{{group="{audit}"}} 1.0' in text
                    and f'reverser_consumergroup_lag{{group="{billing}",partition="0",topic="{topic}"}} 0.0'
                    in text
                )

            await wait_for(settled, "the live group to catch up, the other over limit", timeout_s=WAIT_S)
            async with session.get(f"{base}/metrics") as response:
                metrics = await response.text()
            _, listed = await get(session, f"{base}/v3/kafka/local/consumer")
            _, billing_lag = await get(session, f"{base}/v3/kafka/local/consumer/{billing}/lag")
            _, audit_status = await get(session, f"{base}/v3/kafka/local/consumer/{audit}/status")
    finally:
        live.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await live
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.to_thread(process.communicate, timeout=60)
    assert process.returncode == 0, stderr
    assert sorted(ConsumerList.model_validate(listed).consumers) == sorted([audit, billing])
    billing_doc = ConsumerStatus.model_validate(billing_lag)
    assert (billing_doc.status.status, billing_doc.status.totallag) == ("OK", 0)
    audit_doc = ConsumerStatus.model_validate(audit_status)
    assert audit_doc.status.status == "ERR"
    assert [(p.status, p.current_lag) for p in audit_doc.status.partitions] == [("STOP", 40)]
    assert f'reverser_consumergroup_lag_seconds_threshold{{group="{audit}"}} 0.001' in metrics
    assert f'reverser_consumergroup_over_threshold{{group="{billing}"}}' not in metrics  # no limit
    assert "reverser_lag_groups_over_threshold 1.0" in metrics
    assert 'reverser_lag_groups{status="OK"} 1.0' in metrics
    assert 'reverser_lag_groups{status="ERR"} 1.0' in metrics
    assert 'reverser_lag_partitions{status="STOP"} 1.0' in metrics
    assert "reverser_lag_total_records 40.0" in metrics


def test_serve_address_is_checked(tmp_path: Any) -> None:
    result = run_cli("--workdir", str(tmp_path), "--serve", "nowhere")
    assert result.returncode == 2
    assert "--serve" in result.stderr
    assert "HOST:PORT" in result.stderr
