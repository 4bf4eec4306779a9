"""A member that takes a partition over reads its recent versions back, so a scale still joins.

The scale tier needs the version the router mirrored before an event (pipeline/router/versions.py).
A router that just took a partition has admitted none of its records; it reads back the records
before the committed offset, so the first event it routes still finds its previous version. Tested
on a real log, a real fact follower and index, and two routers of one group, one after the other.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pipeline.attribution import FactFollower, FactIndex, Resolver
from pipeline.codec.fact_batch import FactBatch
from pipeline.config import Settings
from pipeline.content.scale import scale_key
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log.api import Log, TopicPartition
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource
from pipeline.router import Router
from pipeline.router.events import Destination
from pipeline.router.lookup import IndexLookup
from pipeline.router.versions import Predecessors
from tests.attribution.helpers import fact
from tests.attribution.test_follower import record_for
from tests.router.test_router import read_work
from tests.support.wait import wait_for

DEPLOY = GroupResource("apps", "deployments")
GUARD_S = 30.0
READ_BACK_DELAY_S = 1.5


def deployment(rv: str, replicas: int) -> dict[str, Any]:
    meta = {"name": "web", "namespace": "shop", "uid": "uid-web", "resourceVersion": rv}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": replicas}}


async def test_the_first_scale_a_new_member_routes_is_named_by_its_fact(
    any_log: Log, settings: Settings
) -> None:
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    await any_log.create_topics(topic_specs(settings))
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(any_log, topics, index, settings, fetch_timeout_ms=100)
    await follower.start()
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    now_us = int(time.time() * 1_000_000)
    facts = [
        fact("alice", "create", ns="shop", name="web", uid="uid-web", rv="10", stage_us=now_us),
        fact("bob", "update", ns="shop", name="web", uid="uid-web", rv=scale_key("10", 2), stage_us=now_us),
        # carol's scale started from 12, a status version the watch never mirrored
        fact("carol", "update", ns="shop", name="web", uid="uid-web", rv=scale_key("12", 3), stage_us=now_us),
    ]

    def router() -> Router:
        lookup = IndexLookup(follower, Resolver(index, grace_ms=200, max_wait_ms=2000))
        return Router(
            any_log, topics, {"shop": Destination("repo", "main", "live")}, lookup, group_id="g-scale"
        )

    try:
        await any_log.append_many(topics.audit_facts, [record_for(FactBatch("default", DEPLOY, facts))])
        await wait_for(lambda: index.watermark("default") > 0, what="the facts", timeout_s=GUARD_S)
        first = router()
        await any_log.append_many(
            topics.watch_events,
            [
                builder.live(WatchStep("ADDED", deployment("10", 1))),
                builder.live(WatchStep("MODIFIED", deployment("11", 2))),
            ],
        )
        await first.start()
        items = await read_work(any_log, topics.branch_work, 2)
        await first.stop()  # its offsets are committed; the next member knows none of its versions
        second = router()
        await any_log.append_many(
            topics.watch_events, [builder.live(WatchStep("MODIFIED", deployment("13", 3)))]
        )
        await second.start()
        try:
            items = await read_work(any_log, topics.branch_work, 3)
        finally:
            await second.stop()
    finally:
        await follower.stop()
    authors = [(item["body"][1]["author"]["username"], item["body"][1]["author"]["tier"]) for item in items]
    assert authors == [("alice", "exact"), ("bob", "scale"), ("carol", "scale")]


async def test_a_partition_restarted_mid_run_routes_no_event_before_its_history_is_read(
    any_log: Log, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the chaos run with admission facts (seed 791110): a running member that took a
    partition back went on fetching it while its history was still being read back, and the first
    events after the committed offset took their previous versions as unknown (14 scales unknown in
    one run). The partition is restarted here the way a fence restarts it, with the read-back slowed
    and the memory emptied first, as when another member advanced the partition meanwhile (which
    one member cannot arrange); the event appended meanwhile must wait for the history."""
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    await any_log.create_topics(topic_specs(settings))
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(any_log, topics, index, settings, fetch_timeout_ms=100)
    await follower.start()
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    now_us = int(time.time() * 1_000_000)
    facts = [
        fact("alice", "create", ns="shop", name="web", uid="uid-web", rv="10", stage_us=now_us),
        fact("bob", "update", ns="shop", name="web", uid="uid-web", rv=scale_key("10", 2), stage_us=now_us),
        fact("carol", "update", ns="shop", name="web", uid="uid-web", rv=scale_key("12", 3), stage_us=now_us),
    ]
    lookup = IndexLookup(follower, Resolver(index, grace_ms=200, max_wait_ms=2000))
    router = Router(
        any_log, topics, {"shop": Destination("repo", "main", "live")}, lookup, group_id="g-restart"
    )
    read_back = Router._read_back_versions
    resume = IndexLookup.resume_versions

    def forgetting(self: IndexLookup, partition: int, committed: int) -> None:
        self._predecessors = Predecessors()
        resume(self, partition, committed)

    async def slow(self: Router, tp: TopicPartition, committed: int) -> None:
        await any_log.append_many(
            topics.watch_events, [builder.live(WatchStep("MODIFIED", deployment("13", 3)))]
        )
        await asyncio.sleep(READ_BACK_DELAY_S)
        await read_back(self, tp, committed)

    try:
        await any_log.append_many(topics.audit_facts, [record_for(FactBatch("default", DEPLOY, facts))])
        await wait_for(lambda: index.watermark("default") > 0, what="the facts", timeout_s=GUARD_S)
        first = [
            builder.live(WatchStep("ADDED", deployment("10", 1))),
            builder.live(WatchStep("MODIFIED", deployment("11", 2))),
        ]
        [appended, _] = await any_log.append_many(topics.watch_events, first)
        await router.start()
        try:
            await read_work(any_log, topics.branch_work, 2)
            monkeypatch.setattr(IndexLookup, "resume_versions", forgetting)
            monkeypatch.setattr(Router, "_read_back_versions", slow)
            async with router._publishing:  # the path a fenced producer takes
                await router._restart_if_assigned(TopicPartition(topics.watch_events, appended.partition))
            items = await read_work(any_log, topics.branch_work, 3)
        finally:
            await router.stop()
    finally:
        await follower.stop()
    authors = [(item["body"][1]["author"]["username"], item["body"][1]["author"]["tier"]) for item in items]
    assert authors == [("alice", "exact"), ("bob", "scale"), ("carol", "scale")]
