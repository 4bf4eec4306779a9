"""Writing branch work to a real log and waiting for the commit worker to settle it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from pipeline.codec.branch_work import WorkItem, work_record
from pipeline.commit.consumer import CommitWorker, group_id_for
from pipeline.config import Settings
from pipeline.log import open_log
from pipeline.log.api import Log, TopicNotFoundError, TopicPartition
from pipeline.log.topics import TopicNames, topic_specs


async def append_work(log: Log, settings: Settings, items: Sequence[WorkItem]) -> list[tuple[int, int]]:
    """Append items keyed by (provider, branch); returns where each landed."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    await log.create_topics(topic_specs(settings))
    results = await log.append_many(topic, [work_record(i) for i in items])
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


async def commit_all(log: Log, settings: Settings) -> CommitWorker:
    """Run a commit worker until every branch-work partition is settled, then stop it (returned)."""
    worker = CommitWorker(settings, log)
    await worker.start()
    try:
        await wait_settled(log, settings)
    finally:
        await worker.stop()
    return worker


async def commit_items(settings: Settings, items: Sequence[WorkItem]) -> None:
    """Append `items` to the settings' own log and run a commit worker until they are settled."""
    log = open_log(settings)
    await log.start()
    try:
        await append_work(log, settings, items)
        await commit_all(log, settings)
    finally:
        await log.close()
