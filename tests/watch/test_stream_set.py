"""Incremental stream set, rule problems (unknown, ambiguous, Secrets, denylist) and removal."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import ClusterSettings, Settings
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames
from pipeline.watch.cursors import CursorStore
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
from tests.watch.kube_server import FakeKubeApiServer, ResourceDef, corpus_object


async def test_adding_a_rule_starts_exactly_one_new_stream(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    for namespace in ("team-a", "team-b"):
        kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", namespace))
    kubeconfig = kube.kubeconfig(tmp_path)
    rules = [
        rule("configmaps", namespaces=("team-a", "team-b")),
        rule("apps/deployments", namespaces=("team-a",)),
    ]
    config = with_targets(settings, kubeconfig, target("t1", *rules))
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        before = dict(component.manager.streams)
        assert len(before) == 3
        await wait_for(lambda: all(s.state == "Streaming" for s in before.values()), what="three streams")
        requests_before = len(kube.requests)

        changed = with_targets(
            settings, kubeconfig, target("t1", *rules, rule("serviceaccounts", namespaces=("team-a",)))
        )
        assert await component.apply(changed) == (1, 0)
        after = component.manager.streams
        (new_spec,) = set(after) - set(before)
        assert new_spec.stream.resource == "serviceaccounts"
        assert len(after) == len(before) + 1
        assert all(after[spec] is stream for spec, stream in before.items())
        await wait_for(lambda: after[new_spec].state == "Streaming", what="the new stream")
        assert all(stream.sessions == 1 for stream in before.values())
        new_watches = [q for _, q in kube.requests[requests_before:] if q.get("watch") == "true"]
        assert len(new_watches) == 1
        # the same configuration again changes nothing
        assert await component.apply(changed) == (0, 0)
    finally:
        await component.stop()
    events = await read_events(topics_log, config)
    assert kinds(events).count("begin") == 4
    assert [e["body"][1] for e in events if e["resource"] == "serviceaccounts"] != []


async def test_removed_target_stops_its_streams(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    kubeconfig = kube.kubeconfig(tmp_path)
    keep = target("keep", rule("configmaps", namespaces=("team-a",)))
    drop = target("drop", rule("configmaps", "apps/deployments", namespaces=("team-a",)))
    config = with_targets(settings, kubeconfig, keep, drop)
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        await wait_for(lambda: kube.watch_count == 3, what="three watches")
        assert await component.apply(with_targets(settings, kubeconfig, keep)) == (0, 2)
        await wait_for(lambda: kube.watch_count == 1, what="only the kept watch")
        assert {s.stream.target for s in component.manager.streams} == {"keep"}
    finally:
        await component.stop()


async def test_rule_problems_are_reported_per_entry_and_secrets_never_watched(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "team-a"},
        "data": {"password": "aHVudGVyMg=="},
    }
    kube.put(secret)
    mixed = rule(
        "secrets",
        "configmaps",
        "widgets",
        "nothing",
        "pods",
        "example.com/readonlies",
        namespaces=("team-a",),
    )
    config = with_targets(settings, kube.kubeconfig(tmp_path), target("t1", mixed, rule("apps/deployments")))
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        (stream,) = component.manager.streams.values()
        assert stream.spec.stream.resource == "configmaps"
        await wait_for(lambda: stream.state == "Streaming", what="configmaps")
        reasons = {p.resource: p.reason for p in component.manager.problems}
        assert reasons == {
            "secrets": "SecretExcluded",
            "widgets": "Ambiguous",
            "nothing": "Unknown",
            "pods": "NotFollowable",
            "example.com/readonlies": "NotWatchable",
            "apps/deployments": "ScopeMismatch",
        }
        secret_problem = next(p for p in component.manager.problems if p.resource == "secrets")
        assert "encryption" in secret_problem.message
        assert metric("reverser_watch_rule_problems", target="t1", reason="SecretExcluded") == 1
        kube.put({**secret, "data": {"password": "bmV3"}})
    finally:
        await component.stop()
    assert not any("secrets" in path for path, _ in kube.requests)
    events = await read_events(topics_log, config)
    assert {e["resource"] for e in events} == {"configmaps"}
    assert all(b"aHVudGVyMg" not in repr(e).encode() for e in events)


async def test_broken_cluster_config_is_reported_and_other_clusters_run(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("good", rule("configmaps", namespaces=("team-a",)))
    )
    broken = ClusterSettings(name="broken", kubeconfig=tmp_path / "missing-kubeconfig")
    config = config.model_copy(
        update={
            "clusters": [*config.clusters, broken],
            "targets": [
                *config.targets,
                target("bad", rule("configmaps", namespaces=("team-a",)), cluster="broken"),
            ],
        }
    )
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        (stream,) = component.manager.streams.values()
        await wait_for(lambda: stream.state == "Streaming", what="the good cluster's stream")
        (problem,) = component.manager.problems
        assert (problem.target, problem.reason) == ("bad", "ClusterConfigError")
        assert "missing-kubeconfig" in problem.message
    finally:
        await component.stop()


async def test_rediscovery_starts_streams_for_types_served_later(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    config = with_targets(
        settings,
        kube.kubeconfig(tmp_path),
        target("t1", rule("configmaps", "gadgets", namespaces=("team-a",))),
    )
    config.clusters[0] = config.clusters[0].model_copy(update={"watch_rediscover_s": 0.05})
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        assert [p.resource for p in component.manager.problems] == ["gadgets"]
        configmaps = next(iter(component.manager.streams.values()))
        kube.serve(ResourceDef("example.com", "v1", "gadgets", "Gadget", True))
        await wait_for(lambda: len(component.manager.streams) == 2, what="the gadgets stream")
        await wait_for(lambda: component.manager.problems == [], what="the problem to clear")
        assert configmaps.sessions == 1
        assert next(iter(component.manager.streams.values())) is configmaps
    finally:
        await component.stop()


async def test_removed_stream_forgets_its_cursor_and_a_changed_selector_snapshots_again(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    web = corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a")
    web["metadata"]["labels"] = {"app": "web"}
    db = corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a")
    db["metadata"]["labels"] = {"app": "db"}
    kube.put(web)
    kube.put(db)
    kubeconfig = kube.kubeconfig(tmp_path)
    everything = with_targets(settings, kubeconfig, target("t1", rule("configmaps", namespaces=("team-a",))))
    only_web = with_targets(
        settings, kubeconfig, target("t1", rule("configmaps", namespaces=("team-a",), selector="app=web"))
    )
    component = make_component(everything, topics_log, fast_options(everything))
    await component.start()
    try:
        (first,) = component.manager.streams.values()
        await wait_for(lambda: first.state == "Streaming", what="streaming")
        assert await component.apply(only_web) == (1, 1)
        (second,) = component.manager.streams.values()
        await wait_for(lambda: second.snapshots_completed == 1, what="the selector's snapshot")
        key = second.spec.cursor_key
        assert await component.apply(with_targets(settings, kubeconfig)) == (0, 1)
        assert component.manager.cursors.get(key) is None
    finally:
        await component.stop()
    reloaded = CursorStore(topics_log, TopicNames.for_prefix(settings.log.topic_prefix).watch_cursors)
    await reloaded.load()
    assert reloaded.get(key) is None
    events = await read_events(topics_log, everything)
    assert kinds(events) == ["begin", "chunk", "end", "begin", "chunk", "end"]
    assert sorted(o["name"] for o in events[1]["body"][1]["objects"]) == ["cm-a", "cm-collapse"]
    assert [o["name"] for o in events[4]["body"][1]["objects"]] == ["cm-a"]


async def test_changed_cluster_connection_restarts_its_streams_from_their_cursors(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    component = make_component(config, topics_log, fast_options(config))
    await component.start()
    try:
        (first,) = component.manager.streams.values()
        await wait_for(lambda: first.state == "Streaming", what="streaming")
        changed = config.model_copy(
            update={"clusters": [config.clusters[0].model_copy(update={"watch_timeout_s": 120})]}
        )
        assert await component.apply(changed) == (1, 1)
        (second,) = component.manager.streams.values()
        assert second is not first
        await wait_for(lambda: second.state == "Streaming", what="streaming again")
        assert second.reason == "CursorResume"
        kube.put(corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a"))
        events = await wait_for_events(
            topics_log, config, lambda evs: "ADDED cm-collapse" in kinds(evs), "live"
        )
    finally:
        await component.stop()
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-collapse"]
