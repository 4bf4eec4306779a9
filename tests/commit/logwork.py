"""Writing branch work to a real log and waiting for the commit worker to settle it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pipeline.codec import BRANCH_WORK, codec
from pipeline.commit.consumer import group_id_for
from pipeline.commit.work import (
    RESYNC_BEGIN,
    RESYNC_CHUNK,
    RESYNC_END,
    WRITE,
    ResyncBegin,
    ResyncChunk,
    WorkItem,
    Write,
)
from pipeline.config import Settings
from pipeline.log.api import Log, PendingRecord, TopicNotFoundError, TopicPartition
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import branch_key


async def append_work(log: Log, settings: Settings, items: Sequence[WorkItem]) -> list[tuple[int, int]]:
    """Append items keyed by (provider, branch); returns where each landed."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    await log.create_topics(topic_specs(settings))
    records = [
        PendingRecord(
            encode_work(i), key=branch_key(i.provider, i.branch), headers=(codec(BRANCH_WORK).header,)
        )
        for i in items
    ]
    results = await log.append_many(topic, records)
    return [(r.partition, r.offset) for r in results]


async def wait_settled(log: Log, settings: Settings, timeout_s: float = 60.0) -> None:
    """Until the commit worker's group has committed every branch-work partition to its end."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            partitions = await log.partitions_for(topic)
            break
        except TopicNotFoundError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    while True:
        ends = await log.end_offsets(tps)
        committed = await log.group_offsets(group_id_for(settings))
        if all(ends[tp] == 0 or committed.get(tp) == ends[tp] for tp in tps):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not settled: ends={ends} committed={committed}")
        await asyncio.sleep(0.1)


async def committed_offset(log: Log, settings: Settings, partition: int) -> int:
    """The commit worker group's committed offset on one branch-work partition (0 when none yet).

    Checks name the partition their work went to, so "nothing settled" cannot pass on an empty map.
    """
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    committed = await log.group_offsets(group_id_for(settings))
    return committed.get(TopicPartition(topic, partition), 0)


def encode_work(item: WorkItem) -> bytes:
    """The Avro bytes of a work item, as the router writes it (its source position is not used here)."""
    body = item.body
    if isinstance(body, Write):
        a = body.author
        encoded: tuple[str, dict[str, Any]] = (
            WRITE,
            {
                "operation": body.operation,
                "namespace": body.namespace,
                "name": body.name,
                "uid": body.uid,
                "resourceVersion": body.resource_version,
                "object": body.object_json,
                "author": {
                    "outcome": a.outcome,
                    "username": a.username,
                    "displayName": a.display_name,
                    "email": a.email,
                    "tier": a.tier,
                    "actorKind": a.actor_kind,
                },
            },
        )
    elif isinstance(body, ResyncBegin):
        encoded = (RESYNC_BEGIN, {"epoch": body.epoch, "resourceVersion": body.resource_version})
    elif isinstance(body, ResyncChunk):
        encoded = (
            RESYNC_CHUNK,
            {
                "epoch": body.epoch,
                "seq": body.seq,
                "objects": [
                    {
                        "namespace": o.namespace,
                        "name": o.name,
                        "uid": o.uid,
                        "resourceVersion": o.resource_version,
                        "object": o.object_json,
                    }
                    for o in body.objects
                ],
            },
        )
    else:
        encoded = (
            RESYNC_END,
            {
                "epoch": body.epoch,
                "chunks": body.chunks,
                "objects": body.objects,
                "resourceVersion": body.resource_version,
            },
        )
    return codec(BRANCH_WORK).encode(
        {
            "provider": item.provider,
            "branch": item.branch,
            "target": item.target,
            "path": item.path,
            "cluster": item.cluster,
            "group": item.group,
            "version": item.version,
            "resource": item.resource,
            "scope": item.scope,
            "source": {"partition": 0, "offset": 0, "observedAtMs": item.observed_at_ms},
            "body": encoded,
        }
    )
