"""Leader election per source cluster: two replicas, one watcher, hand-over without a snapshot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.incarnation import Incarnation
from pipeline.kube.lease import POD_NAMESPACE_ENV, lease_namespace
from pipeline.log.api import Log
from pipeline.watch.component import WatchComponent
from pipeline.watch.writer import FencedWriter
from tests.support.wait import wait_for
from tests.watch.conftest import (
    fast_options,
    kinds,
    metric,
    read_events,
    rule,
    target,
    wait_for_events,
    with_targets,
)
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

LEASE = ("ops", "reverser-watch-src")


def elected(settings: Settings, kubeconfig: Path, lease_duration_s: float = 1.0) -> Settings:
    """Leader election with a fast renewal; a lease that must not lapse by chance gets a long duration."""
    config = with_targets(settings, kubeconfig, target("t1", rule("configmaps", namespaces=("team-a",))))
    cluster = config.clusters[0].model_copy(
        update={
            "leader_election": True,
            "lease_duration_s": lease_duration_s,
            "lease_renew_s": 0.05,
            "lease_namespace": "ops",
        }
    )
    return config.model_copy(update={"clusters": [cluster]})


def streaming(component: WatchComponent) -> bool:
    return any(s.state == "Streaming" for s in component.manager.streams.values())


async def test_one_replica_watches_and_the_other_takes_over_from_its_cursor(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    # a 30 s lease: a loaded machine stalling the leader's renewals cannot hand the lease over by
    # chance; the handover under test is the explicit release on stop
    config = elected(settings, kube.kubeconfig(tmp_path), lease_duration_s=30.0)
    first = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1")
    second = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-2")
    await first.start()
    await second.start()
    try:
        await wait_for(lambda: streaming(first) or streaming(second), what="a leader")
        leader, standby = (first, second) if streaming(first) else (second, first)
        await wait_for(
            lambda: kube.leases[("ops", "reverser-watch-src")]["spec"]["holderIdentity"] != "", what="lease"
        )
        assert standby.manager.streams == {}
        assert kube.watch_count == 1
        assert kube.leases[("ops", "reverser-watch-src")]["spec"]["holderIdentity"] == leader.manager.identity
        assert metric("reverser_watch_leader", cluster="src") == 1.0

        await leader.stop()  # releases the lease
        await wait_for(lambda: streaming(standby), what="the standby to take over")
        (stream,) = standby.manager.streams.values()
        assert stream.reason == "CursorResume"
        kube.put(corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a"))
        events = await wait_for_events(
            topics_log, config, lambda evs: "ADDED cm-collapse" in kinds(evs), "live"
        )
    finally:
        await first.stop()
        await second.stop()
    assert kinds(events) == ["begin", "chunk", "end", "ADDED cm-collapse"]


async def test_losing_the_lease_stops_the_streams(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    config = elected(settings, kube.kubeconfig(tmp_path))
    component = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1")
    await component.start()
    try:
        await wait_for(lambda: streaming(component), what="leadership")
        kube.set_lease_holder("ops", "reverser-watch-src", "intruder")
        await wait_for(lambda: component.manager.streams == {}, what="the streams to stop")
        assert metric("reverser_watch_leader", cluster="src") == 0.0
        await wait_for(lambda: kube.watch_count == 0, what="the watch to close")
        # the intruder never renews: after the lease duration this replica leads again
        await wait_for(lambda: streaming(component), what="leadership again")
        (stream,) = component.manager.streams.values()
        assert stream.reason == "CursorResume"
    finally:
        await component.stop()
    assert kinds(await read_events(topics_log, config)) == ["begin", "end"]


def test_lease_namespace_is_the_configured_one_else_the_pods(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    sa_file.write_text("from-token-mount\n")
    missing = tmp_path / "absent"

    assert lease_namespace("ops", {"POD_NAMESPACE": "pod-ns"}, sa_file) == "ops"
    assert lease_namespace(None, {"POD_NAMESPACE": "pod-ns"}, sa_file) == "pod-ns"
    assert lease_namespace(None, {}, sa_file) == "from-token-mount"
    assert lease_namespace(None, {"POD_NAMESPACE": " "}, missing) == "default"


async def test_an_unconfigured_lease_lands_in_the_pods_namespace(
    kube: FakeKubeApiServer,
    topics_log: Log,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(POD_NAMESPACE_ENV, "reverser-system")
    kube.namespaces["team-a"] = "Active"
    config = elected(settings, kube.kubeconfig(tmp_path))
    cluster = config.clusters[0].model_copy(update={"lease_namespace": None})
    config = config.model_copy(update={"clusters": [cluster]})
    component = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1")
    await component.start()
    try:
        await wait_for(lambda: streaming(component), what="leadership")
        lease = kube.leases[("reverser-system", "reverser-watch-src")]
        assert lease["spec"]["holderIdentity"] == "replica-1"
        assert not [key for key in kube.leases if key[0] != "reverser-system"]
    finally:
        await component.stop()


def _crashed_run_held(workdir: Path, identity: str) -> Incarnation:
    """The record a SIGKILLed run leaves (its Lease identity), claimed by the next run."""
    crashed = Incarnation.claim(workdir)
    assert crashed is not None
    crashed.holds_leases_as(identity)
    crashed.close()  # the kernel drops the lock of a killed process the same way
    restarted = Incarnation.claim(workdir)
    assert restarted is not None
    return restarted


async def test_a_restarted_replica_takes_the_lease_its_crashed_run_held_at_once(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    config = elected(settings, kube.kubeconfig(tmp_path), lease_duration_s=300.0)
    # the killed run's Lease, renewed just before the kill, would block any other holder for 300 s
    kube.hold_lease("ops", "reverser-watch-src", "replica-1-run-1", duration_s=300)
    incarnation = _crashed_run_held(tmp_path / "work", "replica-1-run-1")
    restarted = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1-run-2")
    restarted.use_incarnation(incarnation)
    await restarted.start()
    try:
        await wait_for(lambda: streaming(restarted), what="the restarted run to take the Lease over")
        assert kube.leases[("ops", "reverser-watch-src")]["spec"]["holderIdentity"] == "replica-1-run-2"
        assert kube.leases[("ops", "reverser-watch-src")]["spec"]["leaseTransitions"] == 1
    finally:
        await restarted.stop()
        incarnation.close()


async def test_a_lease_held_by_another_replica_is_not_taken_for_a_predecessor(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    config = elected(settings, kube.kubeconfig(tmp_path), lease_duration_s=300.0)
    other = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-2")
    await other.start()
    incarnation = _crashed_run_held(tmp_path / "work", "replica-1-run-1")
    restarted = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1-run-2")
    restarted.use_incarnation(incarnation)
    try:
        await wait_for(lambda: streaming(other), what="the other replica to lead")
        await restarted.start()
        renewed = kube.leases[("ops", "reverser-watch-src")]["metadata"]["resourceVersion"]
        # the other replica renews while the restarted one tries: it keeps the Lease
        await wait_for(
            lambda: kube.leases[("ops", "reverser-watch-src")]["metadata"]["resourceVersion"] != renewed,
            what="a renewal by the holder",
        )
        assert kube.leases[("ops", "reverser-watch-src")]["spec"]["holderIdentity"] == "replica-2"
        assert restarted.manager.streams == {}
    finally:
        await restarted.stop()
        await other.stop()
        incarnation.close()


async def test_a_replica_reports_leading_only_once_it_holds_the_fencing_producer(
    kube: FakeKubeApiServer,
    topics_log: Log,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between winning the Lease and fencing the earlier leader, that leader may still write: a
    replica reporting `reverser_watch_leader` then would claim a fence that is not up yet."""
    kube.namespaces["team-a"] = "Active"
    fenced = asyncio.Event()
    take_over = FencedWriter.start

    async def held_back(writer: FencedWriter) -> None:
        await fenced.wait()
        await take_over(writer)

    monkeypatch.setattr(FencedWriter, "start", held_back)
    config = elected(settings, kube.kubeconfig(tmp_path), lease_duration_s=30.0)
    component = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1")
    await component.start()
    try:
        await wait_for(
            lambda: kube.leases.get(LEASE, {}).get("spec", {}).get("holderIdentity") == "replica-1",
            what="the Lease",
        )
        await asyncio.sleep(0.2)  # several renew rounds with the Lease held
        assert metric("reverser_watch_leader", cluster="src") == 0.0
        assert metric("reverser_watch_shards_led", cluster="src") == 0.0
        assert component.manager.streams == {}
        fenced.set()
        await wait_for(lambda: streaming(component), what="the streams once fenced")
        assert metric("reverser_watch_leader", cluster="src") == 1.0
        assert metric("reverser_watch_shards_led", cluster="src") == 1.0
    finally:
        fenced.set()
        await component.stop()
