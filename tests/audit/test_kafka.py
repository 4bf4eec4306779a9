"""The ingress on the real Kafka broker: acknowledged records read back, and 503 while it is down."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pipeline.audit.server import AuditIngress
from pipeline.config import LogSettings, Settings
from pipeline.facts.reduce import group_facts, reduce_event
from pipeline.log.kafka import KafkaLog
from pipeline.log.topics import topic_specs
from pipeline.models import stream_key
from tests.audit.conftest import Running, decode_batch, ingress_settings
from tests.audit.corpus import (
    MUTATIONLAB_AUDIT_FILES,
    WEBHOOK_FILES,
    as_event_list,
    event_list,
    load_recording,
    to_json,
)
from tests.conftest import unique_prefix
from tests.integration.kafka.broker import KafkaBroker
from tests.support.logread import read_topic

pytestmark = pytest.mark.kafka


def named_write(name: str) -> dict[str, Any]:
    return {
        "stage": "ResponseComplete",
        "verb": "create",
        "user": {"username": "alice"},
        "objectRef": {"resource": "configmaps", "namespace": "ns", "name": name},
        "responseObject": {"metadata": {"uid": f"uid-{name}", "resourceVersion": "1"}},
    }


async def start_on_kafka(
    workdir: Path, bootstrap: str, audit: dict[str, Any] | None = None, **log_overrides: Any
) -> Running:
    log_settings = LogSettings(
        backend="kafka", bootstrap_servers=bootstrap, topic_prefix=unique_prefix(), **log_overrides
    )
    settings: Settings = ingress_settings(workdir, log=log_settings, **(audit or {}))
    log = KafkaLog(settings.log)
    await log.start()
    await log.create_topics(topic_specs(settings))
    ingress = AuditIngress(settings, log)
    await ingress.start()
    return Running(ingress, log, settings)


async def stop(running: Running) -> None:
    await running.ingress.stop()
    await running.log.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """Requests here wait on a broker being killed and restarted; bound each one."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield session


async def test_acknowledged_corpus_is_read_back_from_the_broker(
    kafka_bootstrap: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    running = await start_on_kafka(tmp_path, kafka_bootstrap)
    try:
        documents = [as_event_list(load_recording(p)) for p in WEBHOOK_FILES + MUTATIONLAB_AUDIT_FILES]
        expected = []
        for document in documents:
            async with http.post(running.url(), data=to_json(document)) as resp:
                assert resp.status == 200, await resp.text()
            expected.extend(group_facts("default", [reduce_event(e) for e in document["items"]]))
        records = await read_topic(running.log, running.topic)
        assert all(r.key == stream_key("default", decode_batch(r).group_resource) for r in records)
        got = sorted((decode_batch(r) for r in records), key=repr)
        assert got == sorted(expected, key=repr)
    finally:
        await stop(running)


async def test_broker_down_mid_traffic_gives_503_and_every_200_is_durable(
    own_broker: KafkaBroker, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    running = await start_on_kafka(
        tmp_path / "ingress",
        own_broker.bootstrap,
        {"publish_timeout_s": 3.0},
        request_timeout_ms=3000,
        connect_retries=1,
    )
    acknowledged: list[str] = []
    refused = 0
    try:
        loop = asyncio.get_running_loop()
        killed = False
        for n in range(400):
            names = [f"r{n:03d}-{i}" for i in range(50)]
            async with http.post(
                running.url(), data=json.dumps(event_list([named_write(x) for x in names]))
            ) as resp:
                await resp.read()
                if resp.status == 200:
                    acknowledged.extend(names)
                else:
                    # A 503 before the kill is allowed too (a publish timeout on a loaded machine);
                    # the loop ends on refusals after it.
                    assert resp.status == 503
                    if killed:
                        refused += 1
            if len(acknowledged) >= 500 and not killed:
                # kill the broker while the next requests are being published
                kill = loop.run_in_executor(None, own_broker.kill)
                killed = True
            if refused >= 2:
                break
        assert killed
        await kill
        assert refused >= 2
        await loop.run_in_executor(None, own_broker.start)
        for _ in range(60):  # the apiserver's retry: same kind of request, until the broker is back
            with contextlib.suppress(aiohttp.ClientError):
                async with http.post(
                    running.url(), data=json.dumps(event_list([named_write("after")]))
                ) as resp:
                    if resp.status == 200:
                        acknowledged.append("after")
                        break
            await asyncio.sleep(1)
        assert acknowledged[-1] == "after"
        stored = {f.name for r in await read_topic(running.log, running.topic) for f in decode_batch(r).facts}
        missing = [name for name in acknowledged if name not in stored]
        assert missing == []  # nothing answered 200 was lost
    finally:
        await stop(running)
