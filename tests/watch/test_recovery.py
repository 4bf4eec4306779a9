"""Cursor resume across restarts, 410 Gone recovery, abrupt connection drops, bookmarks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.log.api import Log, LogUnavailableError, PendingRecord
from pipeline.log.topics import TopicNames
from pipeline.watch.component import WatchComponent
from pipeline.watch.stream import WatchStream
from tests.support.wait import wait_for
from tests.watch.conftest import (
    fast_options,
    kinds,
    make_component,
    metric,
    read_events,
    rule,
    target,
    wait_for_events,
    with_targets,
)
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

CM_A = "configmap/create-succeeds/watch.added.yaml"


def configmap(name: str, namespace: str = "team-a", value: str = "1") -> dict[str, object]:
    obj = corpus_object(CM_A, namespace)
    obj["metadata"]["name"] = name
    obj["data"] = {"value": value}
    return obj


def only_stream(component: WatchComponent) -> WatchStream:
    (stream,) = component.manager.streams.values()
    return stream


async def started(settings: Settings, log: Log) -> WatchComponent:
    component = make_component(settings, log, fast_options(settings))
    await component.start()
    stream = only_stream(component)
    try:
        await wait_for(lambda: stream.state == "Streaming", what="streaming")
    except AssertionError:
        await component.stop()
        raise
    return component


@pytest.fixture
def config(kube: FakeKubeApiServer, settings: Settings, tmp_path: Path) -> Settings:
    kube.put(configmap("cm-a"))
    return with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )


async def test_restart_resumes_from_the_cursor_without_replaying(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    component = await started(config, topics_log)
    kube.put(configmap("cm-b"))
    await wait_for_events(topics_log, config, lambda evs: "ADDED cm-b" in kinds(evs), "cm-b")
    cursor_rv = only_stream(component).resource_version
    await component.stop()

    kube.put(configmap("cm-c"))  # written while nothing watched
    before_restart = len(kube.requests)
    restarted = await started(config, topics_log)
    try:
        events = await wait_for_events(topics_log, config, lambda evs: "ADDED cm-c" in kinds(evs), "cm-c")
        assert only_stream(restarted).reason == "CursorResume"
    finally:
        await restarted.stop()
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-b", "ADDED cm-c"]
    # the restart's first request resumes the watch from the cursor: no LIST. The cursor may have
    # moved past cm-b's version before the stop (a bookmark), never before it.
    watched = [q for path, q in kube.requests[before_restart:] if path.endswith("/configmaps")]
    resume = watched[0]
    assert resume.get("watch") == "true"
    assert int(resume["resourceVersion"]) >= int(cursor_rv)


@pytest.mark.parametrize("gone_as_http_status", [False, True], ids=["error-event", "http-410"])
async def test_expired_cursor_takes_a_fresh_snapshot_with_a_newer_epoch(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings, gone_as_http_status: bool
) -> None:
    kube.gone_as_http_status = gone_as_http_status
    component = await started(config, topics_log)
    await component.stop()
    kube.put(configmap("cm-b"))
    kube.compact()
    gone_before = metric("reverser_watch_gone_total")

    restarted = make_component(config, topics_log, fast_options(config))
    await restarted.start()
    stream = only_stream(restarted)
    try:
        events = await wait_for_events(
            topics_log, config, lambda evs: kinds(evs).count("end") == 2, "the second snapshot"
        )
        # the end record is on the log a moment before the stream says so (the snapshot's last
        # slice hands the loop back in between): wait for the state, do not race it
        await wait_for(lambda: stream.reason == "AllStreamsReady", what="the stream ready again")
        kube.put(configmap("cm-c"))
        events = await wait_for_events(topics_log, config, lambda evs: "ADDED cm-c" in kinds(evs), "cm-c")
    finally:
        await restarted.stop()
    assert kinds(events) == ["begin", "chunk", "end", "begin", "chunk", "end", "ADDED cm-c"]
    first_epoch = events[0]["body"][1]["epoch"]
    second_epoch = events[3]["body"][1]["epoch"]
    assert second_epoch > first_epoch
    assert sorted(o["name"] for o in events[4]["body"][1]["objects"]) == ["cm-a", "cm-b"]
    assert events[1]["body"][1]["since"] == "", "a first snapshot has no cursor to catch up from"
    since = events[4]["body"][1]["since"]
    assert since, "the snapshot after an expired cursor names that cursor"
    versions = {o["name"]: int(o["resourceVersion"]) for o in events[4]["body"][1]["objects"]}
    assert versions["cm-a"] <= int(since) < versions["cm-b"], "cm-b changed while nothing streamed"
    assert events[5]["body"][1]["since"] == since, "and so does its end marker"
    assert metric("reverser_watch_gone_total") == gone_before + 1
    cursor = restarted.manager.cursors.get(stream.spec.cursor_key)
    assert cursor is not None
    assert cursor.epoch == second_epoch


async def test_abrupt_close_reconnects_from_the_cursor(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    reconnects_before = metric("reverser_watch_reconnects_total")
    component = await started(config, topics_log)
    stream = only_stream(component)
    try:
        kube.put(configmap("cm-b"))
        await wait_for_events(topics_log, config, lambda evs: "ADDED cm-b" in kinds(evs), "cm-b")
        for round_ in range(3):
            kube.drop_connections()
            kube.put(configmap("cm-b", value=f"v{round_}"))
        events = await wait_for_events(
            topics_log, config, lambda evs: kinds(evs).count("MODIFIED cm-b") == 3, "three updates"
        )
        await wait_for(lambda: kube.watch_count == 1, what="one live watch")
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-b"] + ["MODIFIED cm-b"] * 3
    assert stream.sessions >= 2
    assert stream.snapshots_begun == 1
    assert metric("reverser_watch_reconnects_total") >= reconnects_before + 1


async def test_an_event_whose_append_failed_is_written_after_the_resume(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose append fails (a broker lost its partition leader) ends the session; the resume
    from the cursor delivers the same events again. The unchanged-content check must compare them
    with what reached the log, not with what was only handled, or the version is lost for good
    (chaos seed 72816: a scale during the Kafka leader kill never reached Git)."""
    topic = TopicNames.for_prefix(config.log.topic_prefix).watch_events
    append_many = topics_log.append_many
    refused: list[int] = []

    async def leader_lost_once(to: str, records: list[PendingRecord]) -> object:
        if to == topic and not refused:
            refused.append(len(records))
            raise LogUnavailableError("injected: NotLeaderForPartition after bounded retries")
        return await append_many(to, records)

    component = await started(config, topics_log)
    stream = only_stream(component)
    try:
        monkeypatch.setattr(topics_log, "append_many", leader_lost_once)
        kube.put(configmap("cm-a", value="2"))
        events = await wait_for_events(
            topics_log, config, lambda evs: "MODIFIED cm-a" in kinds(evs), "the update after the failure"
        )
        kube.put(configmap("cm-a", value="2"))  # no change: still dropped as unchanged
        kube.put(configmap("cm-a", value="3"))
        events = await wait_for_events(
            topics_log, config, lambda evs: kinds(evs).count("MODIFIED cm-a") == 2, "the next update"
        )
    finally:
        await component.stop()
    assert refused == [1]
    assert stream.sessions >= 2
    assert kinds(events) == ["begin", "chunk", "end", "MODIFIED cm-a", "MODIFIED cm-a"]


async def test_a_batch_is_handled_while_the_one_before_is_appended_and_a_failed_append_loses_neither(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write-behind: the log syncs one batch while the stream handles the next, which is compared
    with the digests of the batch in flight (an unchanged update is dropped). When the append in
    flight fails, the session ends and the resume from the cursor writes every version once."""
    topic = TopicNames.for_prefix(config.log.topic_prefix).watch_events
    append_many = topics_log.append_many
    release = asyncio.Event()
    attempts: list[int] = []

    async def held_then_refused(to: str, records: list[PendingRecord]) -> object:
        if to == topic and not release.is_set():
            attempts.append(len(records))
            await release.wait()
            raise LogUnavailableError("injected: NotLeaderForPartition after bounded retries")
        return await append_many(to, records)

    component = await started(config, topics_log)
    stream = only_stream(component)
    try:
        monkeypatch.setattr(topics_log, "append_many", held_then_refused)
        modified = metric("reverser_watch_events_total", type="MODIFIED")
        unchanged = metric("reverser_watch_events_dropped_total", reason="unchanged")
        kube.put(configmap("cm-a", value="2"))
        await wait_for(lambda: attempts == [1], what="the first batch's append in flight")
        kube.put(configmap("cm-a", value="2"))  # a new resourceVersion, the content in flight
        await wait_for(
            lambda: metric("reverser_watch_events_total", type="MODIFIED") == modified + 2,
            what="the next event handled while the first append waits",
        )
        assert metric("reverser_watch_events_dropped_total", reason="unchanged") == unchanged + 1
        assert attempts == [1], "nothing else is appended before the first batch is acknowledged"
        kube.put(configmap("cm-a", value="3"))
        release.set()
        events = await wait_for_events(
            topics_log, config, lambda evs: kinds(evs).count("MODIFIED cm-a") >= 2, "both versions"
        )
    finally:
        await component.stop()
    assert stream.sessions >= 2
    assert kinds(events) == ["begin", "chunk", "end", "MODIFIED cm-a", "MODIFIED cm-a"]
    values = [e["body"][1]["object"] for e in events[3:]]
    assert [b'"value":"2"' in v for v in values] == [True, False]


async def test_bookmark_advances_the_cursor_without_records(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    component = await started(config, topics_log)
    stream = only_stream(component)
    try:
        kube.put(configmap("unrelated", namespace="elsewhere"))
        kube.bookmark()
        await wait_for(lambda: stream.resource_version == str(kube.rv), what="cursor at the bookmark")
        cursor = component.manager.cursors.get(stream.spec.cursor_key)
        assert cursor is not None
        assert cursor.resource_version == str(kube.rv)
    finally:
        await component.stop()
    assert kinds(await read_events(topics_log, config)) == ["begin", "chunk", "end"]


async def test_status_only_and_no_op_updates_are_dropped(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    first = corpus_object("deployment/status-update/watch.modified.1.yaml", "team-a")
    status_only = corpus_object("deployment/status-update/watch.modified.2.yaml", "team-a")
    kube.namespaces["team-a"] = "Active"
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("apps/deployments", namespaces=("team-a",)))
    )
    component = await started(config, topics_log)
    dropped_before = metric("reverser_watch_events_dropped_total", reason="unchanged")
    try:
        kube.put(first)
        await wait_for_events(topics_log, config, lambda evs: "ADDED d1" in kinds(evs), "d1")
        kube.put(status_only)
        kube.put(status_only)
        scaled = corpus_object("deployment/status-update/watch.modified.2.yaml", "team-a")
        scaled["spec"]["replicas"] = 3
        kube.put(scaled)
        events = await wait_for_events(topics_log, config, lambda evs: "MODIFIED d1" in kinds(evs), "scale")
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "end", "ADDED d1", "MODIFIED d1"]
    assert metric("reverser_watch_events_dropped_total", reason="unchanged") == dropped_before + 2


async def test_undecodable_and_odd_events_are_counted_not_fatal(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    dropped_before = metric("reverser_watch_events_dropped_total", reason="undecodable")
    component = await started(config, topics_log)
    stream = only_stream(component)
    try:
        kube.inject_raw(b'{"type": "MODIFIED", "object": {"metadata": \n')
        kube.inject_raw(b'{"type": "ADDED"}\n')
        kube.inject_raw(b'{"type": "SURPRISE", "object": {}}\n')
        kube.put(configmap("cm-b"))
        events = await wait_for_events(topics_log, config, lambda evs: "ADDED cm-b" in kinds(evs), "cm-b")
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-b"]
    assert stream.sessions == 1
    assert metric("reverser_watch_events_dropped_total", reason="undecodable") == dropped_before + 2


async def test_widening_prune_to_always_forces_one_fresh_snapshot(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    component = await started(config, topics_log)
    stream = only_stream(component)
    always = config.model_copy(update={"targets": [config.targets[0].model_copy(update={"prune": "Always"})]})
    try:
        assert await component.apply(always) == (0, 0)
        await wait_for(lambda: stream.snapshots_completed == 2, what="the forced snapshot")
        kube.put(configmap("cm-b"))
        await wait_for_events(topics_log, config, lambda evs: "ADDED cm-b" in kinds(evs), "cm-b")
        assert await component.apply(always) == (0, 0)
        assert await component.apply(config) == (0, 0)
        kube.put(configmap("cm-c"))
        events = await wait_for_events(topics_log, config, lambda evs: "ADDED cm-c" in kinds(evs), "cm-c")
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "chunk", "end"] * 2 + ["ADDED cm-b", "ADDED cm-c"]
    assert stream.snapshots_completed == 2


async def test_a_first_snapshot_cut_short_leaves_a_baseline_that_every_later_attempt_catches_up_from(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    """A replica that takes a stream over before its first snapshot completed (a handover, a
    crash), and this replica's own retry, snapshot it again: a change made after mirroring began
    is caught up (`since` set, so the router attributes it), not taken into a committer baseline."""
    kube.fail_initial_events.add("team-a")  # the initial events are sent, then the connection drops
    first = make_component(config, topics_log, fast_options(config))
    await first.start()
    stream = only_stream(first)
    try:
        await wait_for(lambda: stream.snapshots_begun >= 2, what="the first snapshot retried")
    finally:
        await first.stop()
    marked = first.manager.cursors.get(stream.spec.cursor_key)
    assert marked is not None
    assert marked.resource_version == "", "nothing to resume from: the snapshot never ended"
    baseline = marked.baseline_version
    assert baseline, "the first attempt marked where mirroring began"

    kube.put(configmap("cm-b"))  # made after mirroring began, while no snapshot completed
    kube.fail_initial_events.discard("team-a")
    successor = await started(config, topics_log)
    try:
        events = await wait_for_events(topics_log, config, lambda evs: "end" in kinds(evs), "an end")
        cursor = successor.manager.cursors.get(stream.spec.cursor_key)
    finally:
        await successor.stop()
    chunks = [e["body"][1] for e in events if e["body"][0].endswith("SnapshotChunk")]
    assert chunks, kinds(events)
    assert {c["since"] for c in chunks} == {baseline}, "the retry and the successor both catch up"
    last = {o["name"]: int(o["resourceVersion"]) for o in chunks[-1]["objects"]}
    assert last["cm-a"] <= int(baseline) < last["cm-b"], "only cm-b changed after mirroring began"
    (end,) = [e["body"][1] for e in events if e["body"][0].endswith("SnapshotEnd")]
    assert end["since"] == baseline
    assert cursor is not None
    assert cursor.resource_version, "a completed snapshot's cursor resumes"
    assert not cursor.baseline_version


async def test_the_attempt_that_marks_the_baseline_is_itself_the_baseline(
    kube: FakeKubeApiServer, topics_log: Log, config: Settings
) -> None:
    component = await started(config, topics_log)
    try:
        events = await wait_for_events(topics_log, config, lambda evs: "end" in kinds(evs), "the first end")
        cursor = component.manager.cursors.get(only_stream(component).spec.cursor_key)
    finally:
        await component.stop()
    assert [e["body"][1]["since"] for e in events if "since" in e["body"][1]] == ["", ""]
    assert cursor is not None
    assert cursor.resource_version
    assert cursor.baseline_version == ""
    # the mark went to the cursors topic before the snapshot: one LIST of one item, then WatchList
    asked = [q for path, q in kube.requests if path.endswith("/configmaps")]
    assert asked[0] == {"limit": "1"}
    assert asked[1].get("sendInitialEvents") == "true"
