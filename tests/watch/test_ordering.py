"""Snapshot-then-deltas ordering on the log, via WatchList and via the LIST fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings, TopicSettings
from pipeline.log import open_log
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, stream_key
from tests.support.wait import wait_for
from tests.watch.conftest import (
    fast_options,
    kinds,
    make_component,
    read_events,
    rule,
    target,
    wait_for_events,
    with_targets,
)
from tests.watch.kube_server import FakeKubeApiServer, corpus_object


async def test_watchlist_snapshot_precedes_live_events(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    kube.put(corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a"))
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        stream = next(iter(component.manager.streams.values()))
        await wait_for(lambda: stream.state == "Streaming", what="streaming")
        updated = corpus_object("configmap/update/watch.modified.yaml", "team-a")
        kube.put(updated)
        events = await wait_for_events(
            topics_log, config, lambda evs: "MODIFIED cm-a" in kinds(evs), "the live update"
        )
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "chunk", "end", "MODIFIED cm-a"]
    begin, chunk, end, live = (e["body"][1] for e in events)
    assert begin["epoch"] == chunk["epoch"] == end["epoch"]
    assert sorted(o["name"] for o in chunk["objects"]) == ["cm-a", "cm-collapse"]
    assert end["objects"] == 2
    assert end["chunks"] == 1
    assert live["object"] is not None
    assert b"managedFields" not in live["object"]
    assert events[0]["_key"] == stream_key("src", GroupResource("", "configmaps"))
    assert events[0]["_headers"]["target"] == b"t1"
    assert events[0]["_headers"]["scope"] == b"team-a"
    assert any(q.get("sendInitialEvents") == "true" for _, q in kube.requests)


async def _events_until_cm_after(config: Settings, topics_log: Log) -> list[dict[str, Any]]:
    """Run the watch component until `cm-after` (written once the LIST was read) is on the log."""
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        return await wait_for_events(
            topics_log, config, lambda evs: "ADDED cm-after" in kinds(evs), "cm-after"
        )
    finally:
        await component.stop()


async def test_list_fallback_releases_only_buffered_events_newer_than_the_list(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.reject_watchlist = True
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    before = corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a")
    after = corpus_object("configmap/generate-name-create/watch.added.yaml", "team-a")
    after["metadata"]["name"] = "cm-after"
    # Runs inside the LIST request: one write the LIST includes (already buffered by the open
    # watch, so it must be skipped) and one the LIST misses (must follow the snapshot).
    kube.around_list = (lambda: kube.put(before), lambda: kube.put(after))
    events = await _events_until_cm_after(config, topics_log)
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-after"]
    snapshot_names = sorted(o["name"] for o in events[1]["body"][1]["objects"])
    assert snapshot_names == ["cm-a", "cm-collapse"]
    assert events[0]["body"][1]["resourceVersion"] == events[2]["body"][1]["resourceVersion"] != ""
    paths = [(path, q) for path, q in kube.requests if "configmaps" in path]
    first_watch = next(
        i for i, (_, q) in enumerate(paths) if q.get("watch") == "true" and "sendInitialEvents" not in q
    )
    # the snapshot's LIST (not the one-item probe that marked the stream's baseline before)
    first_list = next(i for i, (_, q) in enumerate(paths) if "watch" not in q and q.get("limit") != "1")
    assert first_watch < first_list
    assert len(await read_events(topics_log, config)) == 4


async def test_list_fallback_keeps_removals_buffered_during_the_list(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    """Chaos seed 3: a finalizer-held ConfigMap was deleted while the snapshot was being taken.

    The LIST no longer holds it, so the snapshot shows the removal only as an absence, which
    deletes the file only under prune `Always`. The buffered removal events are not newer than
    the LIST, and they used to be skipped as covered by it: under `OnEvent` the delete was lost.
    """
    kube.reject_watchlist = True
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    held = corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a")
    held["metadata"]["name"] = "held-w1-58"
    held["metadata"]["finalizers"] = ["example.com/hold"]
    kube.put(held)
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    after = corpus_object("configmap/generate-name-create/watch.added.yaml", "team-a")
    after["metadata"]["name"] = "cm-after"

    def delete_held() -> None:
        # Inside the LIST, after the plain watch opened: delete requested (deletionTimestamp,
        # finalizer holds it), then the finalizer removed and the object gone.
        held["metadata"]["deletionTimestamp"] = "2026-12-01T03:00:00Z"
        kube.put(held)
        kube.delete(("v1", "ConfigMap"), "team-a", "held-w1-58")

    kube.around_list = (delete_held, lambda: kube.put(after))
    events = await _events_until_cm_after(config, topics_log)
    assert kinds(events) == [
        "begin",
        "chunk",
        "end",
        "MODIFIED held-w1-58",
        "DELETED held-w1-58",
        "ADDED cm-after",
    ]
    assert [o["name"] for o in events[1]["body"][1]["objects"]] == ["cm-a"]
    list_rv = int(events[2]["body"][1]["resourceVersion"])
    terminating, deleted = (e["body"][1] for e in events[3:5])
    assert terminating["deleting"] is True
    assert int(deleted["resourceVersion"]) <= list_rv  # older than the LIST, still written


async def test_large_snapshot_is_chunked_under_the_topic_limit(
    kube: FakeKubeApiServer, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from tests.conftest import make_settings

    # 20 kB rather than less: Kafka counts a producer batch (up to 16 KiB) against the limit.
    base = make_settings(backend, tmp_path, request)
    small = base.model_copy(
        update={"log": base.log.model_copy(update={"topics": TopicSettings(max_message_bytes=20_000)})}
    )
    for index in range(12):
        obj = corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a")
        obj["metadata"]["name"] = f"cm-{index:02d}"
        obj["data"] = {"blob": "x" * 2500}
        kube.put(obj)
    config = with_targets(
        small, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    log = open_log(config)
    await log.start()
    try:
        await log.create_topics(topic_specs(config))
        component = make_component(config, log, fast_options(config))
        await component.start()
        try:
            events = await wait_for_events(log, config, lambda evs: "end" in kinds(evs), "the snapshot end")
        finally:
            await component.stop()
        topic = TopicNames.for_prefix(config.log.topic_prefix).watch_events
        described = await log.describe_topics([topic])
        assert described[topic].configs.get("max.message.bytes") == "20000"
    finally:
        await log.close()
    labels = kinds(events)
    assert labels[0] == "begin"
    assert labels[-1] == "end"
    chunks = [e["body"][1] for e in events if e["body"][0].endswith("SnapshotChunk")]
    assert len(chunks) > 2
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert sorted(o["name"] for c in chunks for o in c["objects"]) == [f"cm-{i:02d}" for i in range(12)]
    end = events[-1]["body"][1]
    assert (end["chunks"], end["objects"]) == (len(chunks), 12)


async def test_server_that_ignores_send_initial_events_falls_back_to_list(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.ignore_watchlist = True
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        (stream,) = component.manager.streams.values()
        await wait_for(lambda: kube.watch_count == 1, what="the watch")
        kube.bookmark()  # a plain bookmark where only initial ADDEDs may come
        await wait_for(lambda: stream.state == "Streaming", what="streaming after the fallback")
        later = corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a")
        kube.put(later)
        events = await wait_for_events(
            topics_log, config, lambda evs: "ADDED cm-collapse" in kinds(evs), "live"
        )
    finally:
        await component.stop()
    # the abandoned WatchList attempt left only its begin marker; the LIST snapshot supersedes it
    assert kinds(events) == ["begin", "begin", "chunk", "end", "ADDED cm-collapse"]
    first, second = events[0]["body"][1]["epoch"], events[1]["body"][1]["epoch"]
    assert second > first
    assert events[1]["body"][1]["resourceVersion"] != ""
