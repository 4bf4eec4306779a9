"""The watch manager's plan of stream changes, decided without a cluster (pipeline/watch/plan.py)."""

from __future__ import annotations

from pipeline.codec.stream_id import StreamId
from pipeline.config import TargetSettings
from pipeline.watch.plan import desired_streams, plan_streams
from pipeline.watch.resolve import StreamSpec


def spec(
    resource: str, *, target: str = "t", cluster: str = "c", version: str = "v1", scope: str = ""
) -> StreamSpec:
    stream = StreamId(target, cluster, "", version, resource, scope)
    return StreamSpec(stream, "default", resource.title(), True, "")


def target(name: str = "t", *, cluster: str = "c", prune: str = "OnEvent") -> TargetSettings:
    return TargetSettings(name=name, provider="git", cluster=cluster, prune=prune)  # type: ignore[arg-type]


def everywhere(_spec: StreamSpec) -> bool:
    return True


def test_an_unchanged_world_changes_nothing() -> None:
    running = [spec("configmaps"), spec("secrets")]
    plan = plan_streams(
        running,
        set(running),
        retired_clusters=(),
        writable=everywhere,
        previous_targets={"t": target()},
        targets=[target()],
    )
    assert (plan.stop, plan.restart, plan.start, plan.resnapshot) == ([], [], [], [])
    assert plan.fresh == plan.forget == frozenset()


def test_a_removed_stream_stops_and_its_cursor_is_forgotten() -> None:
    kept, gone = spec("configmaps"), spec("secrets")
    plan = plan_streams(
        [kept, gone], {kept}, retired_clusters=(), writable=everywhere, previous_targets={}, targets=[]
    )
    assert plan.stop == [gone]
    assert plan.start == []
    assert plan.forget == {gone.cursor_key}
    assert plan.stop_reason(gone) == "removed"


def test_a_replaced_stream_starts_fresh_under_the_same_cursor_key() -> None:
    old, new = spec("configmaps", version="v1beta1"), spec("configmaps", version="v1")
    assert old.cursor_key == new.cursor_key
    plan = plan_streams(
        [old], {new}, retired_clusters=(), writable=everywhere, previous_targets={}, targets=[]
    )
    assert (plan.stop, plan.start) == ([old], [new])
    assert plan.fresh == {new.cursor_key}, "its snapshot must sweep what the old selector matched"
    assert plan.stop_reason(old) == "replaced"
    assert plan.forget == frozenset(), "the new stream writes under the key"


def test_streams_of_a_reconnected_cluster_restart_and_resume() -> None:
    here, there = spec("configmaps"), spec("configmaps", cluster="other")
    plan = plan_streams(
        [here, there],
        {here, there},
        retired_clusters={"other"},
        writable=everywhere,
        previous_targets={},
        targets=[],
    )
    assert (plan.stop, plan.restart, plan.start) == ([], [there], [there])
    assert plan.stop_reason(there) == "cluster_changed"
    assert plan.fresh == plan.forget == frozenset()


def test_only_streams_of_led_shards_get_started() -> None:
    led, follower, other_shard = spec("configmaps"), spec("configmaps", cluster="standby"), spec("secrets")
    plan = plan_streams(
        [],
        {led, follower, other_shard},
        retired_clusters=(),
        writable=lambda s: s.stream.cluster == "c" and s.stream.resource == "configmaps",
        previous_targets={},
        targets=[],
    )
    assert plan.start == [led]


def test_widening_prune_to_always_resnapshots_the_targets_streams() -> None:
    mine, theirs, added = spec("configmaps"), spec("configmaps", target="u"), spec("secrets")
    plan = plan_streams(
        [mine, theirs],
        {mine, theirs, added},
        retired_clusters=(),
        writable=everywhere,
        previous_targets={"t": target(), "u": target("u")},
        targets=[target(prune="Always"), target("u")],
    )
    assert plan.start == [added]
    assert plan.resnapshot == [mine, added]


def test_desired_streams_keep_types_discovery_stopped_serving_while_the_target_is_unchanged() -> None:
    cm, crd = spec("configmaps"), spec("widgets")
    same = target()
    assert desired_streams(same, same, [cm, crd], [cm]) == {cm, crd}
    assert desired_streams(same, same, [cm, crd], None) == {cm, crd}, "discovery failed: keep running"
    changed = same.model_copy(update={"prune": "Always"})
    assert desired_streams(changed, same, [cm, crd], [cm]) == {cm}
    assert desired_streams(changed, same, [cm, crd], None) == set()


def test_desired_streams_replace_a_type_whose_version_changed() -> None:
    old, new = spec("widgets", version="v1beta1"), spec("widgets", version="v1")
    same = target()
    assert desired_streams(same, same, [old], [new]) == {new}
    assert desired_streams(same, same, [spec("cm", target="other")], []) == set(), "other targets' streams"
