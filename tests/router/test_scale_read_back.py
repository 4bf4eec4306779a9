"""A member that takes a partition over reads its recent versions back, so a scale still joins.

The scale tier needs the version the router mirrored before an event (pipeline/router/versions.py).
A router that just took a partition has admitted none of its records; it reads back the records
before the committed offset, so the first event it routes still finds its previous version. Tested
on a real log, a real fact follower and index, and two routers of one group, one after the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
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


@dataclass
class Scene:
    """A real log with the three facts filed and followed: alice's create at 10, bob's scale from 10
    to 2 and carol's from 12 (a status version the watch never mirrors) to 3."""

    log: Log
    topics: TopicNames
    index: FactIndex
    follower: FactFollower
    builder: WatchRecordBuilder

    def router(self, group_id: str) -> Router:
        lookup = IndexLookup(self.follower, Resolver(self.index, grace_ms=200, max_wait_ms=2000))
        destinations = {"shop": Destination("repo", "main", "live")}
        return Router(self.log, self.topics, destinations, lookup, group_id=group_id)


@contextlib.asynccontextmanager
async def scene(log: Log, settings: Settings) -> AsyncIterator[Scene]:
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    await log.create_topics(topic_specs(settings))
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(log, topics, index, settings, fetch_timeout_ms=100)
    await follower.start()
    now_us = int(time.time() * 1_000_000)
    facts = [
        fact("alice", "create", ns="shop", name="web", uid="uid-web", rv="10", stage_us=now_us),
        fact("bob", "update", ns="shop", name="web", uid="uid-web", rv=scale_key("10", 2), stage_us=now_us),
        fact("carol", "update", ns="shop", name="web", uid="uid-web", rv=scale_key("12", 3), stage_us=now_us),
    ]
    try:
        await log.append_many(topics.audit_facts, [record_for(FactBatch("default", DEPLOY, facts))])
        await wait_for(lambda: index.watermark("default") > 0, what="the facts", timeout_s=GUARD_S)
        yield Scene(log, topics, index, follower, WatchRecordBuilder("default", "default", "shop", "shop"))
    finally:
        await follower.stop()


def authors_of(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["body"][1]["author"]["username"], item["body"][1]["author"]["tier"]) for item in items]


async def test_the_first_scale_a_new_member_routes_is_named_by_its_fact(
    any_log: Log, settings: Settings
) -> None:
    async with scene(any_log, settings) as at:
        first = at.router("g-scale")
        await any_log.append_many(
            at.topics.watch_events,
            [
                at.builder.live(WatchStep("ADDED", deployment("10", 1))),
                at.builder.live(WatchStep("MODIFIED", deployment("11", 2))),
            ],
        )
        await first.start()
        await read_work(any_log, at.topics.branch_work, 2)
        await first.stop()  # its offsets are committed; the next member knows none of its versions
        second = at.router("g-scale")
        await any_log.append_many(
            at.topics.watch_events, [at.builder.live(WatchStep("MODIFIED", deployment("13", 3)))]
        )
        await second.start()
        try:
            items = await read_work(any_log, at.topics.branch_work, 3)
        finally:
            await second.stop()
    assert authors_of(items) == [("alice", "exact"), ("bob", "scale"), ("carol", "scale")]


async def test_a_partition_restarted_mid_run_routes_no_event_before_its_history_is_read(
    any_log: Log, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the chaos run with admission facts (seed 791110): a running member that took a
    partition back went on fetching it while its history was still being read back, and the first
    events after the committed offset took their previous versions as unknown (14 scales unknown in
    one run). The partition is restarted here the way a fence restarts it, with the read-back slowed
    and the memory emptied first, as when another member advanced the partition meanwhile (which
    one member cannot arrange); the event appended meanwhile must wait for the history."""
    read_back = Router._read_back_versions
    resume = IndexLookup.resume_versions

    def forgetting(self: IndexLookup, partition: int, committed: int) -> None:
        self._predecessors = Predecessors()
        resume(self, partition, committed)

    async with scene(any_log, settings) as at:

        async def slow(self: Router, tp: TopicPartition, committed: int) -> None:
            await any_log.append_many(
                at.topics.watch_events, [at.builder.live(WatchStep("MODIFIED", deployment("13", 3)))]
            )
            await asyncio.sleep(READ_BACK_DELAY_S)
            await read_back(self, tp, committed)

        first = [
            at.builder.live(WatchStep("ADDED", deployment("10", 1))),
            at.builder.live(WatchStep("MODIFIED", deployment("11", 2))),
        ]
        [appended, _] = await any_log.append_many(at.topics.watch_events, first)
        router = at.router("g-restart")
        await router.start()
        try:
            await read_work(any_log, at.topics.branch_work, 2)
            monkeypatch.setattr(IndexLookup, "resume_versions", forgetting)
            monkeypatch.setattr(Router, "_read_back_versions", slow)
            async with router._publishing:  # the path a fenced producer takes
                await router._restart_if_assigned(TopicPartition(at.topics.watch_events, appended.partition))
            items = await read_work(any_log, at.topics.branch_work, 3)
        finally:
            await router.stop()
    assert authors_of(items) == [("alice", "exact"), ("bob", "scale"), ("carol", "scale")]
