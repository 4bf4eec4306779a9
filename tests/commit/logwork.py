"""Writing branch work to a real log and waiting for the commit worker to settle it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from pipeline.codec import BRANCH_WORK, codec
from pipeline.commit.consumer import group_id_for
from pipeline.commit.work import WorkItem, encode_work
from pipeline.config import Settings
from pipeline.log.api import Log, PendingRecord, TopicPartition
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
    partitions = await log.partitions_for(topic)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    while True:
        ends = await log.end_offsets(tps)
        committed = await log.group_offsets(group_id_for(settings))
        if all(ends[tp] == 0 or committed.get(tp) == ends[tp] for tp in tps):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not settled: ends={ends} committed={committed}")
        await asyncio.sleep(0.1)
