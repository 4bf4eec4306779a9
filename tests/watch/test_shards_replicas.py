"""Sharded watching with three replicas in one process each sharing the log: the shards spread over
the replicas, each type is watched by exactly one of them, and a replica that stops hands its
shards over (the real-process kill test is `test_shards_processes.py`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.watch.component import WatchComponent
from pipeline.watch.shards import assign_shards, shard_of
from pipeline.watch.writer import WRITER_HEADER
from tests.support.wait import wait_for
from tests.watch.conftest import carriers, fast_options, metric, read_events, rule, target, with_targets
from tests.watch.kube_server import FakeKubeApiServer

SHARDS = 3
LEASE_BASE = "reverser-watch-src"
TYPES = (
    ("", "configmaps", "v1", "ConfigMap"),
    ("two.example.com", "widgets", "two.example.com/v1", "Widget"),
    ("", "services", "v1", "Service"),
    ("apps", "deployments", "apps/v1", "Deployment"),
)


def sharded(settings: Settings, kubeconfig: Path) -> Settings:
    resources = [f"{group}/{resource}" if group else resource for group, resource, _, _ in TYPES]
    config = with_targets(settings, kubeconfig, target("t1", rule(*resources, namespaces=("team-a",))))
    cluster = config.clusters[0].model_copy(
        update={
            "leader_election": True,
            "lease_duration_s": 1.0,
            "lease_renew_s": 0.05,
            "lease_namespace": "ops",
            "watch_shards": SHARDS,
        }
    )
    return config.model_copy(update={"clusters": [cluster]})


def holders(kube: FakeKubeApiServer) -> dict[int, str]:
    names = [f"{LEASE_BASE}-shard-{shard}" for shard in range(SHARDS)]
    return dict(enumerate(kube.lease_holders("ops", names)))


def running(components: list[WatchComponent]) -> Counter[str]:
    return Counter(spec.stream.resource for c in components for spec in c.manager.streams)


def obj(group_version: str, kind: str, name: str) -> dict[str, object]:
    body: dict[str, object] = {
        "apiVersion": group_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "team-a"},
    }
    if kind == "ConfigMap":
        body["data"] = {"k": name}
    return body


async def test_three_replicas_share_the_shards_and_hand_them_over(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    config = sharded(settings, kube.kubeconfig(tmp_path))
    replicas = [
        WatchComponent(config, topics_log, options=fast_options(config), identity=f"replica-{i}")
        for i in range(3)
    ]
    for replica in replicas:
        await replica.start()
    try:
        expected = assign_shards(LEASE_BASE, SHARDS, [r.manager.identity for r in replicas])
        await wait_for(
            lambda: holders(kube) == expected, timeout_s=30, what="the shards to follow the roster"
        )
        assert sorted(expected.values()) == ["replica-0", "replica-1", "replica-2"]  # one shard each
        await wait_for(
            lambda: running(replicas) == Counter(r for _, r, _, _ in TYPES),
            timeout_s=30,
            what="every type watched once",
        )
        for replica in replicas:
            for spec in replica.manager.streams:
                shard = shard_of(spec.stream.group, spec.stream.resource, SHARDS)
                assert expected[shard] == replica.manager.identity
        assert metric("reverser_watch_shards", cluster="src") == SHARDS

        # the replica leading the configmaps' shard stops: its shard goes to a live one
        cm_shard = shard_of("", "configmaps", SHARDS)
        leaving = next(r for r in replicas if r.manager.identity == expected[cm_shard])
        staying = [r for r in replicas if r is not leaving]
        await leaving.stop()
        replicas.remove(leaving)
        after = assign_shards(LEASE_BASE, SHARDS, [r.manager.identity for r in staying])
        await wait_for(lambda: holders(kube) == after, timeout_s=30, what="the hand-over")
        await wait_for(
            lambda: running(staying) == Counter(r for _, r, _, _ in TYPES),
            timeout_s=30,
            what="every type watched once by the two left",
        )
        for group_version, kind in (("v1", "ConfigMap"), ("apps/v1", "Deployment")):
            kube.put(obj(group_version, kind, f"after-{kind.lower()}"))

        wanted = {"after-configmap": ("", "configmaps"), "after-deployment": ("apps", "deployments")}

        async def both_written() -> bool:
            return set(wanted) <= set(carriers(await read_events(topics_log, config)))

        await wait_for(both_written, timeout_s=30, what="the new objects on the log")
        for name, event in carriers(await read_events(topics_log, config)).items():
            if name in wanted:
                group, resource = wanted[name]
                # written through the fenced producer of the shard's new owner
                assert event["_headers"][WRITER_HEADER].decode() == after[shard_of(group, resource, SHARDS)]
    finally:
        for replica in replicas:
            await replica.stop()
    assert not any(holders(kube).values())  # every Lease released at stop
    assert not [k for k in kube.leases if "-member-" in k[1]]  # and every member Lease deleted
