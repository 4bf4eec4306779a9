"""A restart's fact-index rebuild inside the real service: ops endpoints and the audit webhook answer.

The service runs in this process on the embedded log with the audit ingress and the router's fact
follower; the log already holds enough facts that the replay takes many event-loop slices. The
replay must yield: `/readyz` answers 503 with the replay's progress while it runs, and the audit
webhook accepts a batch (appending facts needs no index) before the index is ready.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from pipeline.audit.component import build as build_audit
from pipeline.codec import FACT_BATCH, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.config import AuditSettings, LogSettings, MetricsSettings, Settings
from pipeline.log import open_log
from pipeline.log.api import Log, PendingRecord
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, stream_key
from pipeline.router.component import RouterComponent
from pipeline.service.app import Service
from tests.conftest import unique_prefix
from tests.support.wait import wait_for

RECORDS = 40_000
FACTS_PER_RECORD = 4
TYPES = [GroupResource("", f"kind{i}s") for i in range(8)]


def payloads() -> list[tuple[GroupResource, bytes]]:
    writer = codec(FACT_BATCH)
    made = []
    for r in range(256):
        gr = TYPES[r % len(TYPES)]
        facts = [
            AuthorFact(
                author=f"user{r % 7}",
                verb="update",
                audit_id=f"a-{r}-{i}",
                namespace="ns",
                name=f"n-{r}-{i}",
                uid=str(uuid.uuid4()),
                resource_version=str(1000 + r * 8 + i),
                stage_timestamp_us=0,
            )
            for i in range(FACTS_PER_RECORD)
        ]
        made.append((gr, writer.encode(FactBatch("default", gr, facts).to_avro())))
    return made


async def fill(settings: Settings) -> None:
    writer = codec(FACT_BATCH)
    log = open_log(settings)
    await log.start()
    try:
        await log.create_topics(topic_specs(settings))
        topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
        made = payloads()
        for start in range(0, RECORDS, 2000):
            await log.append_many(
                topic,
                [
                    PendingRecord(
                        made[i % len(made)][1],
                        key=stream_key("default", made[i % len(made)][0]),
                        headers=(writer.header,),
                    )
                    for i in range(start, start + 2000)
                ],
            )
    finally:
        await log.close()


def audit_list() -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "kind": "EventList",
        "apiVersion": "audit.k8s.io/v1",
        "items": [
            {
                "kind": "Event",
                "apiVersion": "audit.k8s.io/v1",
                "auditID": str(uuid.uuid4()),
                "stage": "ResponseComplete",
                "verb": "update",
                "user": {"username": "alice"},
                "objectRef": {
                    "apiVersion": "v1",
                    "resource": "configmaps",
                    "namespace": "ns",
                    "name": "late",
                },
                "responseObject": {
                    "metadata": {"name": "late", "namespace": "ns", "uid": "u-late", "resourceVersion": "99"}
                },
                "responseStatus": {"code": 200},
                "stageTimestamp": stamp,
            }
        ],
    }


async def test_ops_and_webhook_answer_while_the_fact_index_rebuilds(tmp_path: Path) -> None:
    settings = Settings(
        workdir=tmp_path,
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0"),
        audit=AuditSettings(addr="127.0.0.1:0"),
    )
    await fill(settings)
    router: list[RouterComponent] = []

    def build_router(s: Settings, log: Log) -> RouterComponent:
        router.append(RouterComponent(s, log))
        return router[0]

    service = Service(settings, factories=[build_audit, build_router])  # type: ignore[list-item]
    starting = asyncio.create_task(service.start())
    try:
        async with aiohttp.ClientSession() as http:
            await wait_for(lambda: service.metrics_port is not None, what="the ops server")
            ops = f"http://127.0.0.1:{service.metrics_port}"
            replaying: list[str] = []
            while not replaying:
                async with http.get(f"{ops}/readyz") as response:
                    text = await response.text()
                if response.status == 200:
                    break
                if "fact index replaying" in text:
                    replaying.append(text)
            assert replaying, "no /readyz answer came while the fact index was replaying"
            assert "records applied" in replaying[0]
            assert "remaining" in replaying[0]
            follower = router[0].follower
            assert not follower.ready()
            ingress = service.components[0]
            async with http.post(
                f"http://127.0.0.1:{ingress.port}/audit-webhook/default",  # type: ignore[attr-defined]
                data=json.dumps(audit_list()),
                headers={"Content-Type": "application/json"},
            ) as response:
                assert response.status == 200, await response.text()
            assert not follower.ready(), "the webhook answered only after the replay had finished"
            async with http.get(f"{ops}/healthz") as response:
                assert response.status == 200
            await starting
            await asyncio.wait_for(follower.wait_ready(), 120)

            async def ready() -> bool:
                async with http.get(f"{ops}/readyz") as response:
                    return (response.status, await response.text()) == (200, "ready\n")

            # the ops thread serves the readiness the event loop last published
            await wait_for(ready, what="/readyz once the replay finished")
            assert follower.records_applied >= RECORDS
    finally:
        await starting
        await service.stop()
