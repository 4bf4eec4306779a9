"""Snapshot-then-deltas ordering on the log, via WatchList and via the LIST fallback."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.models import GroupResource, stream_key
from tests.watch.conftest import (
    fast_options,
    kinds,
    make_component,
    read_events,
    rule,
    target,
    wait_for,
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
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        events = await wait_for_events(
            topics_log, config, lambda evs: "ADDED cm-after" in kinds(evs), "cm-after"
        )
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-after"]
    snapshot_names = sorted(o["name"] for o in events[1]["body"][1]["objects"])
    assert snapshot_names == ["cm-a", "cm-collapse"]
    assert events[0]["body"][1]["resourceVersion"] == events[2]["body"][1]["resourceVersion"] != ""
    paths = [(path, q) for path, q in kube.requests if "configmaps" in path]
    first_watch = next(
        i for i, (_, q) in enumerate(paths) if q.get("watch") == "true" and "sendInitialEvents" not in q
    )
    first_list = next(i for i, (_, q) in enumerate(paths) if "watch" not in q)
    assert first_watch < first_list
    assert len(await read_events(topics_log, config)) == 4
