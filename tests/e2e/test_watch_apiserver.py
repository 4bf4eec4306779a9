"""Watch ingestion against a real etcd + kube-apiserver (`make e2e`; `plane` from tests/e2e/conftest.py).

Pins what the watch-protocol test server stands in for: the real server's WatchList snapshot (or
its refusal, which the LIST fallback handles), live events, and a restart that resumes from the
cursor without a snapshot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from pipeline.config import Settings
from pipeline.kube.lease import POD_NAMESPACE_ENV
from pipeline.log import open_log
from pipeline.log.topics import topic_specs
from pipeline.watch.component import WatchComponent
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client
from tests.support.wait import wait_for
from tests.watch.conftest import (
    fast_options,
    kinds,
    make_component,
    metric,
    rule,
    target,
    wait_for_events,
    with_targets,
)

pytestmark = pytest.mark.e2e

NAMESPACE = "watch-e2e"


def configmap(name: str, value: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, namespace=NAMESPACE, labels={"app": "e2e"}),
        data={"value": value},
    )


async def test_snapshot_live_events_and_cursor_resume_on_kube_apiserver(
    plane: ControlPlane, tmp_path: Path
) -> None:
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        await core.create_namespaced_config_map(NAMESPACE, configmap("cm-a", "1"))
        config = with_targets(
            Settings(workdir=tmp_path / "work"),
            plane.kubeconfig,
            target("t1", rule("configmaps", namespaces=(NAMESPACE,))),
        )
        log = open_log(config)
        await log.start()
        try:
            await log.create_topics(topic_specs(config))
            watchlist_before = metric("reverser_watch_snapshots_total", mode="watchlist", outcome="completed")
            list_before = metric("reverser_watch_snapshots_total", mode="list", outcome="completed")
            component = make_component(config, log, fast_options(config))
            await component.start()
            try:
                (stream,) = component.manager.streams.values()
                await wait_for(lambda: stream.state == "Streaming", what="streaming", timeout_s=60)
                await core.patch_namespaced_config_map("cm-a", NAMESPACE, {"data": {"value": "2"}})
                events = await wait_for_events(
                    log, config, lambda evs: "MODIFIED cm-a" in kinds(evs), "update"
                )
            finally:
                await component.stop()
            snapshots = (
                metric("reverser_watch_snapshots_total", mode="watchlist", outcome="completed")
                - watchlist_before,
                metric("reverser_watch_snapshots_total", mode="list", outcome="completed") - list_before,
            )
            assert snapshots == (1, 0)  # kube-apiserver 1.37 serves WatchList
            assert kinds(events) == ["begin", "chunk", "end", "MODIFIED cm-a"]
            (snapshot_object,) = events[1]["body"][1]["objects"]
            assert snapshot_object["name"] == "cm-a"
            assert b"managedFields" not in snapshot_object["object"]
            assert events[2]["body"][1]["resourceVersion"] != ""

            await core.create_namespaced_config_map(NAMESPACE, configmap("cm-b", "1"))
            restarted = make_component(config, log, fast_options(config))
            await restarted.start()
            try:
                (stream,) = restarted.manager.streams.values()
                events = await wait_for_events(log, config, lambda evs: "ADDED cm-b" in kinds(evs), "cm-b")
                assert stream.reason == "CursorResume"
                await core.delete_namespaced_config_map("cm-b", NAMESPACE)
                events = await wait_for_events(
                    log, config, lambda evs: "DELETED cm-b" in kinds(evs), "delete"
                )
            finally:
                await restarted.stop()
            assert kinds(events) == ["begin", "chunk", "end", "MODIFIED cm-a", "ADDED cm-b", "DELETED cm-b"]
            deleted = events[-1]["body"][1]
            assert deleted["object"] is not None
            assert deleted["labels"] == {"app": "e2e"}
        finally:
            await log.close()


async def test_leader_election_on_a_real_lease(
    plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no lease_namespace configured: the Lease goes to the pod's namespace, as the chart sets it
    monkeypatch.setenv(POD_NAMESPACE_ENV, "watch-lease")
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        leases = client.CoordinationV1Api(api)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="watch-lease")))
        config = with_targets(
            Settings(workdir=tmp_path / "work"),
            plane.kubeconfig,
            target("t1", rule("configmaps", namespaces=("watch-lease",))),
        )
        cluster = config.clusters[0].model_copy(
            update={"leader_election": True, "lease_duration_s": 2.0, "lease_renew_s": 0.2}
        )
        config = config.model_copy(update={"clusters": [cluster]})
        log = open_log(config)
        await log.start()
        try:
            await log.create_topics(topic_specs(config))
            first = WatchComponent(config, log, options=fast_options(config), identity="e2e-1")
            second = WatchComponent(config, log, options=fast_options(config), identity="e2e-2")
            await first.start()
            await second.start()
            try:
                await wait_for(
                    lambda: bool(first.manager.streams) != bool(second.manager.streams),
                    what="one leader",
                    timeout_s=30,
                )
                leader, standby = (first, second) if first.manager.streams else (second, first)
                lease = await leases.read_namespaced_lease("reverser-watch-src", "watch-lease")
                assert lease.spec.holder_identity == leader.manager.identity
                await leader.stop()
                await wait_for(lambda: bool(standby.manager.streams), what="the hand-over", timeout_s=30)
                lease = await leases.read_namespaced_lease("reverser-watch-src", "watch-lease")
                assert lease.spec.holder_identity == standby.manager.identity
                assert lease.spec.lease_transitions >= 1
            finally:
                await first.stop()
                await second.stop()
        finally:
            await log.close()
