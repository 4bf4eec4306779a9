"""No duplicate work from the router: real `reverser run` processes SIGKILLed between sending a
transaction's work and committing it, several rounds, then one that finishes; on the real broker
and on the embedded log.

The kill comes from the crash point `REVERSER_CRASH_AT` (pipeline/log/faults.py) at the n-th
transaction of the process: after the work items were written (Kafka: sent and acknowledged inside
the open transaction; embedded: written to the segment files) and before the commit point. A
router that appended and committed offsets separately puts those items on branch-work twice.
"""

from __future__ import annotations

import json
import random
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition

from pipeline.codec import BRANCH_WORK, SCHEMA_HEADER, codec
from pipeline.config import Settings
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log import Log, TopicPartition
from pipeline.log.faults import CRASH_AT_ENV
from pipeline.log.topics import TopicNames, topic_specs
from tests.commit.helpers import files
from tests.commit.logwork import wait_settled
from tests.commit.objstate import as_files, first_read, raw_keys
from tests.conftest import started_log
from tests.router.test_router import configmap
from tests.support.process import ReverserProcess, bare_remote, base_config
from tests.support.wait import wait_for

INPUTS = 240
CRASH_ROUNDS = 3
CRASH_POINT = {"kafka": "kafka-transaction-sent", "embedded": "embedded-transaction-written"}


def service_config(settings: Settings, workdir: Path, remote: Path) -> dict[str, Any]:
    return {
        **base_config(settings, workdir),
        # no audit ingress: without a hold past the grace every event settles at once (the test is
        # about routing, not attribution; the production hold would idle each process 15 s)
        "attribution": {"grace_ms": 0, "max_wait_ms": 0},
        "providers": [{"name": "repo", "url": remote.as_uri()}],
        "targets": [{"name": "shop", "provider": "repo", "branch": "main", "path": "clusters/default"}],
    }


async def write_inputs(log: Log, settings: Settings) -> TopicNames:
    await log.create_topics(topic_specs(settings))
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    partitions = await log.partitions_for(topics.watch_events)
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    for i in range(INPUTS):
        record = builder.live(WatchStep("ADDED", configmap(f"cm-{i}", str(i + 1))))
        await log.append(
            topics.watch_events,
            record.value,
            key=record.key,
            headers=record.headers,
            partition=i % partitions,
        )
    return topics


async def work_sources(log: Log, topic: str) -> Counter[tuple[int, int]]:
    """How often each watch-events position appears as the source of a committed work item."""
    tps = [TopicPartition(topic, p) for p in range(await log.partitions_for(topic))]
    ends = await log.end_offsets(tps)
    reader = log.reader()
    await reader.assign(dict.fromkeys(tps, 0))
    sources: Counter[tuple[int, int]] = Counter()
    deadline = time.monotonic() + 60
    try:
        while any(reader.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for record in (await reader.fetch(timeout_ms=500)).records:
                item = codec(BRANCH_WORK).decode(record.value, record.header(SCHEMA_HEADER))
                sources[(item["source"]["partition"], item["source"]["offset"])] += 1
    finally:
        await reader.close()
    return sources


async def raw_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records physically on `topic`, aborted ones included (read_uncommitted)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
    await consumer.start()
    try:
        tps = [KafkaTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        count = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(position >= ends[tp] for tp, position in zip(tps, positions, strict=True)):
                break
            batches = await consumer.getmany(timeout_ms=500)
            count += sum(len(messages) for messages in batches.values())
        return count
    finally:
        await consumer.stop()


def group_offsets_file(workdir: Path, group: str) -> dict[int, int]:
    """The embedded log's committed offsets of `group`, read from its file (the child holds the lock)."""
    path = workdir / "log" / "groups" / f"{urllib.parse.quote(group, safe='')}.json"
    try:
        entries = json.loads(path.read_text())["offsets"]
    except (OSError, ValueError):
        return {}
    return {partition: offset for _topic, partition, offset in entries}


async def test_a_router_killed_between_append_and_commit_never_duplicates_work(
    settings: Settings, backend: str, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    workdir = tmp_path / "work"
    settings = settings.model_copy(update={"workdir": workdir})
    async with started_log(settings) as log:
        topics = await write_inputs(log, settings)
        partitions = await log.partitions_for(topics.watch_events)
        ends = await log.end_offsets([TopicPartition(topics.watch_events, p) for p in range(partitions)])
    group = f"{settings.log.topic_prefix}.router"
    config = service_config(settings, workdir, remote)
    rng = random.Random(1313)
    crashed = 0
    for round_ in range(CRASH_ROUNDS):
        crash_at = f"{CRASH_POINT[backend]}:{rng.randint(1, 3)}"
        process = ReverserProcess(tmp_path, f"crash-{round_}", config, {CRASH_AT_ENV: crash_at})
        process.start()
        try:
            await wait_for(
                lambda p=process: p.exit_code() is not None,  # type: ignore[misc]
                timeout_s=120,
                what="the crash point",
            )
        finally:
            code = process.stop()
        assert code == -9, process.log_tail()
        crashed += 1

    final = ReverserProcess(tmp_path, "final", config)
    final.start()
    try:
        if backend == "embedded":

            def caught_up() -> bool:
                committed = group_offsets_file(workdir, group)
                return all(committed.get(tp.partition) == end for tp, end in ends.items())

            await wait_for(caught_up, timeout_s=120, what="the final router to commit every input")
        else:
            async with started_log(settings) as log:

                async def kafka_caught_up() -> bool:
                    return await log.group_offsets(group) == ends

                await wait_for(kafka_caught_up, timeout_s=120, what="the final router to commit every input")
        if backend == "kafka":
            # the commit workers were killed at the same random moments: object-state must still
            # hold every version once (embedded: the running service holds the log's lock)
            async with started_log(settings) as log:
                await wait_settled(log, settings, timeout_s=120)
    finally:
        assert final.stop() == 0, final.log_tail()
    if backend == "kafka":
        async with started_log(settings) as log:
            states = await first_read(log, settings, "shop")
            versions = await raw_keys(log, settings)
        assert sorted(s.name for s in states) == sorted(f"cm-{i}" for i in range(INPUTS))
        assert [key for key, times in versions.items() if times > 1] == []
        assert as_files(states) == files(remote)

    async with started_log(settings) as log:
        sources = await work_sources(log, topics.branch_work)
        physical = (
            await raw_records(
                settings.log.bootstrap_servers,
                topics.branch_work,
                await log.partitions_for(topics.branch_work),
            )
            if backend == "kafka"
            else None
        )
    expected = {(tp.partition, offset) for tp, end in ends.items() for offset in range(end)}
    assert set(sources) == expected
    assert [position for position, times in sources.items() if times > 1] == []
    assert crashed == CRASH_ROUNDS
    if physical is not None:
        # The killed transactions did write work; only the transaction kept it from being read.
        assert physical > len(expected)
    else:
        logs = "".join((tmp_path / f"crash-{r}.log").read_text() for r in range(1, CRASH_ROUNDS))
        logs += (tmp_path / "final.log").read_text()
        assert "rolled back" in logs
