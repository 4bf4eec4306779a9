"""The router on a real log (both backends): order, pass-through, commits after acks, bad input.

The author lookup is a test double here (a dict plus per-event delays) because these tests pin the
router's own guarantees; attribution itself is tested end to end in tests/attribution and through
the demo test.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.codec import BRANCH_WORK, SCHEMA_HEADER, codec
from pipeline.codec.branch_work import Removal, WorkAuthor
from pipeline.codec.watch_event import LiveEvent, WatchRecord
from pipeline.config import Settings
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log.api import (
    AppendResult,
    GroupOffsets,
    Log,
    LogUnavailableError,
    PendingRecord,
    Placement,
    TopicPartition,
    TransactionalProducer,
)
from pipeline.log.kafka import KafkaLog
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, branch_key
from pipeline.router import Router
from pipeline.router.events import CaughtUp, Destination
from tests.conftest import outage_settings
from tests.integration.kafka.broker import KafkaBroker
from tests.support.wait import wait_for

CONFIGMAPS = GroupResource("", "configmaps")


class ScriptedLookup:
    """Resolves authors from a table, each after a scripted delay, to force out-of-order completion."""

    def __init__(self, authors: dict[str, str], delays_s: dict[str, float] | None = None) -> None:
        self.authors = authors
        self.delays_s = delays_s or {}
        self.calls: list[str] = []

    async def wait_ready(self) -> None:
        return None

    def ready(self) -> bool:
        return True

    def resume_versions(self, partition: int, committed: int) -> None:
        pass

    def note_version(self, watch: WatchRecord) -> None:
        pass

    async def catch_up(self, watch: WatchRecord) -> list[CaughtUp]:
        return []

    async def removals_for(self, watch: WatchRecord) -> list[Removal]:
        return []

    async def author_for(self, watch: WatchRecord) -> WorkAuthor:
        assert isinstance(watch.body, LiveEvent)
        name = watch.body.name
        self.calls.append(name)
        await asyncio.sleep(self.delays_s.get(name, 0.0))
        user = self.authors.get(name)
        if user is None:
            return WorkAuthor("UNRESOLVED")
        return WorkAuthor("RESOLVED", user, tier="exact", actor_kind="user")


def configmap(name: str, rv: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": f"uid-{name}", "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": rv}}


async def prepare(log: Log, settings: Settings) -> TopicNames:
    await log.create_topics(topic_specs(settings))
    return TopicNames.for_prefix(settings.log.topic_prefix)


def destinations() -> dict[str, Destination]:
    return {"shop": Destination("repo", "main", "clusters/default")}


async def read_work(
    log: Log,
    topic: str,
    expected: int,
    timeout_s: float = 30.0,
    key: bytes = branch_key("repo", "main"),
    *,
    other_keys: bool = False,
) -> list[dict[str, Any]]:
    """The first `expected` work items of `key`; other keys fail the test unless `other_keys`."""
    partitions = await log.partitions_for(topic)
    reader = log.reader()
    await reader.assign({TopicPartition(topic, p): 0 for p in range(partitions)})
    items: list[dict[str, Any]] = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        while len(items) < expected and asyncio.get_running_loop().time() < deadline:
            fetched = await reader.fetch(timeout_ms=200)
            for record in fetched.records:
                if other_keys and record.key != key:
                    continue
                assert record.key == key
                items.append(codec(BRANCH_WORK).decode(record.value, record.header(SCHEMA_HEADER)))
    finally:
        await reader.close()
    assert len(items) >= expected, f"only {len(items)} of {expected} work items within {timeout_s:.0f} s"
    return items


async def wait_committed(log: Log, group: str, tp: TopicPartition, offset: int) -> None:
    for _ in range(300):
        if (await log.group_offsets(group)).get(tp) == offset:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{group} never committed {offset} on {tp}: {await log.group_offsets(group)}")


def added(names: Iterable[str]) -> list[PendingRecord]:
    """The live ADDED events of ConfigMaps `names` (resourceVersion 1) in the `shop` target's stream."""
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    return [builder.live(WatchStep("ADDED", configmap(name, "1"))) for name in names]


async def append_live(log: Log, topics: TopicNames, steps: Sequence[WatchStep], target: str = "shop") -> None:
    builder = WatchRecordBuilder("default", "default", target, "shop")
    for step in steps:
        record = builder.live(step)
        await log.append(topics.watch_events, record.value, key=record.key, headers=record.headers)


async def test_emits_in_log_order_although_resolutions_finish_out_of_order(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    steps = [WatchStep("ADDED", configmap(name, "1")) for name in ("slow", "fast", "medium")]
    steps.append(WatchStep("MODIFIED", configmap("slow", "2")))
    await append_live(any_log, topics, steps)
    lookup = ScriptedLookup({"slow": "alice", "fast": "bob", "medium": "carol"}, {"slow": 0.6, "medium": 0.3})
    router = Router(any_log, topics, destinations(), lookup, group_id="g-order")
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 4)
    finally:
        await router.stop()
    writes = [item["body"][1] for item in items]
    assert [(w["name"], w["resourceVersion"]) for w in writes] == [
        ("slow", "1"),
        ("fast", "1"),
        ("medium", "1"),
        ("slow", "2"),
    ]
    assert [w["author"]["username"] for w in writes] == ["alice", "bob", "carol", "alice"]
    assert [w["operation"] for w in writes] == ["CREATE", "CREATE", "CREATE", "UPDATE"]
    assert all(item["path"] == "clusters/default" and item["target"] == "shop" for item in items)
    # the lookups overlapped: all three first events were asked before the slow one finished
    assert lookup.calls[:3] == ["slow", "fast", "medium"]


async def test_snapshot_markers_pass_through_between_live_events_and_deletes_carry_no_object(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    records = [
        builder.live(WatchStep("ADDED", configmap("a", "1"))),
        *builder.snapshot(CONFIGMAPS, "v1", 7, "5", [configmap("a", "1"), configmap("b", "2")]),
        builder.live(WatchStep("MODIFIED", configmap("b", "3", deleting=True))),
    ]
    await any_log.append_many(topics.watch_events, records)
    router = Router(
        any_log, topics, destinations(), ScriptedLookup({"a": "alice", "b": "bob"}), group_id="g-snap"
    )
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 5)
    finally:
        await router.stop()
    kinds = [item["body"][0].rsplit(".", 1)[1] for item in items]
    assert kinds == ["Write", "ResyncBegin", "ResyncChunk", "ResyncEnd", "Write"]
    assert items[1]["body"][1] == {"epoch": 7, "resourceVersion": "5"}
    assert [o["name"] for o in items[2]["body"][1]["objects"]] == ["a", "b"]
    deleted = items[4]["body"][1]
    assert deleted["operation"] == "DELETE"
    assert deleted["object"] is None
    assert deleted["author"]["username"] == "bob"


async def test_unknown_targets_are_dropped_but_their_offsets_committed(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("x", "1"))], target="gone")
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("y", "1"))])
    router = Router(any_log, topics, destinations(), ScriptedLookup({"y": "bob"}), group_id="g-unknown")
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 1)
        tp = await single_partition_of(any_log, topics.watch_events)
        await wait_committed(any_log, "g-unknown", tp, 2)
    finally:
        await router.stop()
    assert [item["body"][1]["name"] for item in items] == ["y"]
    assert router.stats.dropped == 1


async def single_partition_of(log: Log, topic: str) -> TopicPartition:
    partitions = await log.partitions_for(topic)
    ends = await log.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    used = [tp for tp, end in ends.items() if end > 0]
    assert len(used) == 1, ends
    return used[0]


async def test_undecodable_records_are_dead_lettered_and_skipped(any_log: Log, settings: Settings) -> None:
    topics = await prepare(any_log, settings)
    key = (
        WatchRecordBuilder("default", "default", "shop", "shop")
        .live(WatchStep("ADDED", configmap("z", "1")))
        .key
    )
    await any_log.append(
        topics.watch_events, b"\x00garbage", key=key, headers=(("reverser-schema", b"watch_event/1"),)
    )
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("z", "1"))])
    dead_before = REGISTRY.get_sample_value("reverser_router_dead_lettered_total") or 0.0
    router = Router(any_log, topics, destinations(), ScriptedLookup({"z": "zoe"}), group_id="g-dead")
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 1)
    finally:
        await router.stop()
    assert items[0]["body"][1]["author"]["username"] == "zoe"
    reader = any_log.reader()
    await reader.assign({TopicPartition(topics.dead_letter, 0): 0})
    try:
        fetched = await reader.fetch(timeout_ms=2000)
    finally:
        await reader.close()
    letter = codec("dead_letter").decode(fetched.records[0].value, fetched.records[0].header(SCHEMA_HEADER))
    assert letter["stage"] == "router"
    assert letter["value"] == b"\x00garbage"
    assert letter["offset"] == 0
    assert letter["key"] == key
    assert letter["errorClass"] == "DecodeError"
    assert letter["schema"] == "watch_event/1"
    assert letter["headers"] == [{"name": "reverser-schema", "value": b"watch_event/1"}]
    assert letter["attempt"] == 1
    assert abs(letter["timeMs"] - fetched.records[0].timestamp_ms) < 60_000
    assert REGISTRY.get_sample_value("reverser_router_dead_lettered_total") == dead_before + 1


class FlakyLog:
    """Delegates to a real log but refuses the first `failures` transactions (fault injection)."""

    def __init__(self, inner: Log, failures: int) -> None:
        self._inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        return FlakyProducer(self, self._inner.transactional_producer(transactional_id))


class FlakyProducer(TransactionalProducer):
    """Fails the first transactions after the seam checked them, as a broker that is away would."""

    def __init__(self, owner: FlakyLog, inner: TransactionalProducer) -> None:
        super().__init__(owner._inner, inner.transactional_id)
        self._owner = owner
        self._inner = inner

    async def start(self) -> None:
        await self._inner.start()

    async def _commit(self, placements: list[Placement], offsets: GroupOffsets | None) -> list[AppendResult]:
        if self._owner.failures > 0:
            self._owner.failures -= 1
            raise LogUnavailableError("injected: broker not reachable")
        return await self._inner._commit(placements, offsets)

    async def close(self) -> None:
        await self._inner.close()


async def test_offsets_are_committed_only_after_the_work_was_acknowledged(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("w", "1"))])
    flaky = FlakyLog(any_log, failures=2)
    router = Router(
        flaky,
        topics,
        destinations(),
        ScriptedLookup({"w": "wendy"}),  # type: ignore[arg-type]
        group_id="g-acks",
    )
    await router.start()
    try:
        tp = await single_partition_of(any_log, topics.watch_events)

        async def retried_without_committing() -> bool:
            if flaky.failures == 0:
                return True
            assert tp not in await any_log.group_offsets("g-acks"), "committed an unacknowledged append"
            return False

        await wait_for(retried_without_committing, what="the failed appends to be retried")
        items = await read_work(any_log, topics.branch_work, 1)
        await wait_committed(any_log, "g-acks", tp, 1)
    finally:
        await router.stop()
    assert len(items) == 1


async def test_a_restarted_router_resumes_after_its_committed_offsets(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("r1", "1"))])
    first = Router(any_log, topics, destinations(), ScriptedLookup({"r1": "rita"}), group_id="g-restart")
    await first.start()
    try:
        await read_work(any_log, topics.branch_work, 1)
        tp = await single_partition_of(any_log, topics.watch_events)
        await wait_committed(any_log, "g-restart", tp, 1)
    finally:
        await first.stop()
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("r2", "1"))])
    second = Router(any_log, topics, destinations(), ScriptedLookup({"r2": "rob"}), group_id="g-restart")
    await second.start()
    try:
        items = await read_work(any_log, topics.branch_work, 2)
        await wait_committed(any_log, "g-restart", tp, 2)
    finally:
        await second.stop()
    assert [item["body"][1]["name"] for item in items] == ["r1", "r2"]
    assert second.stats.consumed == 1


@pytest.mark.parametrize(
    ("event_type", "deleting", "operation"),
    [
        ("ADDED", False, "CREATE"),
        ("MODIFIED", False, "UPDATE"),
        ("DELETED", False, "DELETE"),
        ("MODIFIED", True, "DELETE"),
        ("ADDED", True, "DELETE"),
    ],
)
def test_operation_mapping_records_deletion_at_intent_time(
    event_type: str, deleting: bool, operation: str
) -> None:
    from pipeline.codec.branch_work import operation_of

    assert operation_of(event_type, deleting).value == operation


@pytest.mark.kafka
async def test_a_router_that_cannot_join_while_the_broker_is_down_joins_once_it_is_back(
    own_broker: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The router joins its group only once the fact index is ready, after the service started: a
    join that fails then is retried, not left as a replica that routes nothing."""
    settings = outage_settings(own_broker.bootstrap, tmp_path)
    log = KafkaLog(settings.log)
    await log.start()
    router: Router | None = None
    try:
        topics = await prepare(log, settings)
        await append_live(log, topics, [WatchStep("ADDED", configmap("waiting", "1"))])
        await asyncio.to_thread(own_broker.kill)
        router = Router(
            log, topics, destinations(), ScriptedLookup({"waiting": "alice"}), group_id="g-rejoin"
        )
        with caplog.at_level(logging.WARNING, logger="pipeline.router.router"):
            await router.start()
            await wait_for(
                lambda: "router cannot join its group" in caplog.text,
                what="a join failing while the broker is down",
                timeout_s=60,
            )
        await asyncio.to_thread(own_broker.start)
        items = await read_work(log, topics.branch_work, expected=1, timeout_s=120)
        assert [(i["body"][1]["name"], i["body"][1]["author"]["username"]) for i in items] == [
            ("waiting", "alice")
        ]
    finally:
        if router is not None:
            await router.stop()
        await log.close()


async def watch_transactions(
    log: Log, settings: Settings, topics: TopicNames, names: list[str]
) -> TopicPartition:
    """One ADDED ConfigMap per name, each in a transaction of its own; the partition they are on."""
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    producer = log.transactional_producer(f"{settings.log.topic_prefix}-watch")
    await producer.start()
    try:
        for name in names:
            await producer.commit(
                {topics.watch_events: [builder.live(WatchStep("ADDED", configmap(name, "1")))]}
            )
    finally:
        await producer.close()
    return await single_partition_of(log, topics.watch_events)


@pytest.mark.kafka
async def test_a_drained_router_commits_past_the_last_transaction_marker(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Watch events come in transactions, so the log ends one past the last record (its commit
    marker). A router that routed everything must commit that end, even though it may learn of the
    marker only after it committed the work: else the group shows a lag of 1 until the next event."""
    settings = outage_settings(kafka_bootstrap, tmp_path)
    log = KafkaLog(settings.log)
    await log.start()
    router: Router | None = None
    try:
        topics = await prepare(log, settings)
        tp = await watch_transactions(log, settings, topics, ["m1", "m2", "m3"])
        end = (await log.end_offsets([tp]))[tp]
        assert end == 6  # three records, three markers
        router = Router(
            log, topics, destinations(), ScriptedLookup({"m1": "a", "m2": "b", "m3": "c"}), group_id="g-mark"
        )
        await router.start()
        await read_work(log, topics.branch_work, 3)
        await wait_committed(log, "g-mark", tp, end)
    finally:
        if router is not None:
            await router.stop()
        await log.close()


@pytest.mark.kafka
async def test_a_router_with_nothing_to_route_commits_past_the_marker_its_predecessor_left(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The previous owner was killed after it committed its last work but before it saw the marker
    after it: the group sits one short of the end. The next router gets no record from the
    partition and must still commit past the marker, else the group lags by 1 for good."""
    settings = outage_settings(kafka_bootstrap, tmp_path)
    log = KafkaLog(settings.log)
    await log.start()
    router: Router | None = None
    try:
        topics = await prepare(log, settings)
        tp = await watch_transactions(log, settings, topics, ["m1", "m2"])
        end = (await log.end_offsets([tp]))[tp]
        assert end == 4  # two records, two markers
        await log.commit_group_offsets("g-quiet", {tp: end - 1})
        router = Router(log, topics, destinations(), ScriptedLookup({}), group_id="g-quiet")
        await router.start()
        await wait_committed(log, "g-quiet", tp, end)
        assert router.stats.consumed == 0
    finally:
        if router is not None:
            await router.stop()
        await log.close()
