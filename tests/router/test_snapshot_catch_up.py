"""Changes made while the watch was down: snapshot objects joined with the fact index like live events.

A new watch leader whose cursors expired takes snapshots; an object newer than the stream's cursor
(`since` on the chunk) was changed meanwhile by somebody, and no live event carried it. The router
resolves it with the same tiers, grace, watermark and maximum wait as a live event and puts a
`Write` under that author right before the chunk, so the commit worker commits it as a normal,
attributed commit before the snapshot's `reconciled` commit. Tested on a real log, a real fact
follower and index, the real commit worker and a bare Git remote.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from pipeline.attribution import FactFollower, FactIndex, Resolver
from pipeline.codec.branch_work import Operation
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.codec.stream_id import StreamId
from pipeline.codec.watch_event import SnapshotChunk, SnapshotObject, StreamHead, WatchRecord
from pipeline.commit.consumer import CommitWorker
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log.api import Log, PendingRecord
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource
from pipeline.router import Router
from pipeline.router.events import Destination, changed_objects
from pipeline.router.lookup import IndexLookup
from tests.attribution.helpers import fact
from tests.attribution.test_follower import record_for
from tests.commit.helpers import bare_remote, git
from tests.commit.logwork import wait_settled
from tests.router.test_router import configmap, read_work
from tests.support.wait import wait_for

CM = GroupResource("", "configmaps")
GUARD_S = 30.0


def chunk(since: str, versions: dict[str, str]) -> WatchRecord:
    objects = tuple(SnapshotObject("shop", n, f"uid-{n}", rv, b"{}") for n, rv in versions.items())
    body = SnapshotChunk(1, 0, objects, since)
    head = StreamHead("default", StreamId("shop", "default", CM.group, "v1", CM.resource, "shop"))
    return WatchRecord(0, 0, head, 0, body)


def test_only_objects_newer_than_the_cursor_are_caught_up() -> None:
    changed = changed_objects(chunk("10", {"old": "9", "same": "10", "new": "11", "opaque": "x1"}))
    assert [o.name for o in changed] == ["new", "opaque"], "incomparable versions count as changed"


def test_a_snapshot_without_a_cursor_is_a_baseline() -> None:
    assert changed_objects(chunk("", {"a": "1", "b": "2"})) == []


def test_the_operation_follows_the_verb_of_the_fact() -> None:
    assert Operation.of_verb("create") is Operation.CREATE
    assert Operation.of_verb("CREATE") is Operation.CREATE
    assert [Operation.of_verb(v) for v in ("update", "patch", "apply", "")] == [Operation.UPDATE] * 4


def changes(outcome: str) -> float:
    return REGISTRY.get_sample_value("reverser_router_snapshot_changes_total", {"outcome": outcome}) or 0.0


def authors_of(remote: Path, path: str) -> list[str]:
    out = git(remote, "log", "--reverse", "--format=%an|%s", "main", "--", path)
    return [line for line in out.splitlines() if line]


async def route_and_commit(
    log: Log,
    settings: Settings,
    tmp_path: Path,
    facts: list[AuthorFact],
    watch_records: list[PendingRecord],
    work_items: int,
) -> tuple[Path, list[dict[str, Any]]]:
    """Facts filed by a follower, the watch records routed through the index, the work committed.

    Returns the bare remote and the branch-work items the router produced.
    """
    remote = bare_remote(tmp_path / "remote.git")
    cfg = settings.model_copy(
        update={
            "providers": [
                ProviderSettings(name="repo", url=str(remote), commit_window_s=0.2, push_cooldown_s=0.2)
            ],
            "targets": [TargetSettings(name="shop", provider="repo", path="live")],
        }
    )
    topics = TopicNames.for_prefix(cfg.log.topic_prefix)
    await log.create_topics(topic_specs(cfg))
    index = FactIndex.from_settings(cfg.attribution)
    follower = FactFollower(log, topics, index, cfg, fetch_timeout_ms=100)
    await follower.start()
    router = Router(
        log,
        topics,
        {"shop": Destination("repo", "main", "live")},
        IndexLookup(follower, Resolver(index, grace_ms=200, max_wait_ms=int(GUARD_S * 1000))),
        group_id="g-catch-up",
    )
    worker = CommitWorker(cfg, log)
    try:
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        await log.append_many(topics.audit_facts, [record_for(FactBatch("default", CM, facts))])
        await wait_for(lambda: index.watermark("default") > 0, what="the facts", timeout_s=GUARD_S)
        await log.append_many(topics.watch_events, watch_records)
        await router.start()
        items = await read_work(log, topics.branch_work, work_items)
        await worker.start()
        await wait_settled(log, cfg)
    finally:
        await worker.stop()
        await router.stop()
        await follower.stop()
    return remote, items


async def test_changes_made_while_the_watch_was_down_are_committed_under_their_authors(
    any_log: Log, settings: Settings, tmp_path: Path
) -> None:
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    # The stream's cursor was 5 when its watch ended; meanwhile alice changed b (rv 9) and somebody
    # whose audit never arrived changed c (rv 8); a was last changed at 3 and is already in Git.
    snapshot = builder.snapshot(
        CM, "v1", 7, "10", [configmap("a", "3"), configmap("b", "9"), configmap("c", "8")], since="5"
    )
    attributed, unresolved = changes("attributed"), changes("unresolved")
    # alice's fact, stamped after the snapshot was observed: audit time has passed it, so c
    # (no fact) settles once the grace is over instead of waiting for the maximum wait
    now_us = int(time.time() * 1_000_000)
    alice = fact("alice", "update", ns="shop", name="b", uid="uid-b", rv="9", stage_us=now_us)
    remote, items = await route_and_commit(any_log, settings, tmp_path, [alice], snapshot, 5)
    kinds: list[tuple[Any, ...]] = []
    for item in items:
        name, body = item["body"]
        if name.endswith("Write"):
            kinds.append(
                (
                    "Write",
                    body["name"],
                    body["operation"],
                    body["author"]["outcome"],
                    body["author"]["username"],
                )
            )
        else:
            kinds.append((name.rsplit(".", 1)[1],))
    assert kinds == [
        ("ResyncBegin",),
        ("Write", "b", "UPDATE", "RESOLVED", "alice"),
        ("Write", "c", "UPDATE", "UNRESOLVED", ""),
        ("ResyncChunk",),
        ("ResyncEnd",),
    ]
    assert changes("attributed") == attributed + 1
    assert changes("unresolved") == unresolved + 1
    assert authors_of(remote, "live/shop/configmaps/b.yaml") == ["alice|[UPDATE] v1/configmaps/b"]
    assert authors_of(remote, "live/shop/configmaps/c.yaml") == [
        "unknown (attribution unresolved)|[UPDATE] v1/configmaps/c"
    ]
    # a was not changed while the watch was down: only the snapshot's baseline commit carries it
    (baseline,) = authors_of(remote, "live/shop/configmaps/a.yaml")
    assert baseline.startswith("Reverser Pipeline|reconciled 1 configmaps")


async def test_a_delete_no_watch_event_carried_is_committed_under_the_deleter(
    any_log: Log, settings: Settings, tmp_path: Path
) -> None:
    """d was deleted between the stream's cursor and its snapshot: only its absence shows it."""
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    created = builder.live(WatchStep("ADDED", configmap("d", "4")))
    snapshot = builder.snapshot(CM, "v1", 7, "10", [configmap("a", "3")], since="5")
    now_us = int(time.time() * 1_000_000)
    facts = [
        fact("alice", "create", ns="shop", name="d", uid="uid-d", rv="4", stage_us=now_us - 2_000_000),
        fact("carol", "delete", ns="shop", name="d", uid="uid-d", rv="6", stage_us=now_us),
    ]
    # the ADDED, then the snapshot's begin, chunk (a is unchanged) and end with the removal
    remote, items = await route_and_commit(any_log, settings, tmp_path, facts, [created, *snapshot], 4)
    end = items[-1]["body"][1]
    assert [(r["uid"], r["name"], r["author"]["username"]) for r in end["removals"]] == [
        ("uid-d", "d", "carol")
    ]
    assert authors_of(remote, "live/shop/configmaps/d.yaml") == [
        "alice|[CREATE] v1/configmaps/d",
        "carol|[DELETE] v1/configmaps/d",
    ]
    assert "reconciled 1 configmaps" in git(remote, "log", "-1", "--format=%s", "main")
