"""Sharded watching on a real etcd + kube-apiserver: the roster's member Leases (a label-selected
list, deletes with a resourceVersion precondition) and the shard Leases, as the real Lease API
serves them. The shard logic itself is tested on the watch-protocol test server
(`tests/watch/test_shards_*.py`); this pins the API it relies on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from pipeline.config import Settings
from pipeline.kube.lease import POD_NAMESPACE_ENV
from pipeline.kube.roster import ROSTER_LABEL
from pipeline.log import open_log
from pipeline.log.topics import topic_specs
from pipeline.watch.component import WatchComponent
from pipeline.watch.shards import assign_shards, shard_of
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client
from tests.support.wait import wait_for
from tests.watch.conftest import fast_options, rule, target, with_targets

pytestmark = pytest.mark.e2e

NAMESPACE = "watch-shards"
SHARDS = 2
BASE = "reverser-watch-src"
RESOURCES = ("configmaps", "services", "serviceaccounts", "apps/deployments")


async def test_two_replicas_split_two_shards_on_real_leases_and_hand_over(
    plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(POD_NAMESPACE_ENV, NAMESPACE)
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        leases = client.CoordinationV1Api(api)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        config = with_targets(
            Settings(workdir=tmp_path / "work"),
            plane.kubeconfig,
            target("t1", rule(*RESOURCES, namespaces=(NAMESPACE,))),
        )
        cluster = config.clusters[0].model_copy(
            update={
                "leader_election": True,
                "lease_duration_s": 2.0,
                "lease_renew_s": 0.2,
                "watch_shards": SHARDS,
            }
        )
        config = config.model_copy(update={"clusters": [cluster]})
        log = open_log(config)
        await log.start()

        async def shard_holders() -> dict[int, str]:
            found = {}
            for shard in range(SHARDS):
                try:
                    lease = await leases.read_namespaced_lease(f"{BASE}-shard-{shard}", NAMESPACE)
                except client.ApiException:
                    found[shard] = ""
                    continue
                found[shard] = lease.spec.holder_identity or ""
            return found

        try:
            await log.create_topics(topic_specs(config))
            replicas = [
                WatchComponent(config, log, options=fast_options(config), identity=f"e2e-{i}")
                for i in range(2)
            ]
            for replica in replicas:
                await replica.start()
            try:
                expected = assign_shards(BASE, SHARDS, ["e2e-0", "e2e-1"])

                async def spread() -> bool:
                    return await shard_holders() == expected

                await wait_for(spread, timeout_s=60, what="one shard per replica")
                members = await leases.list_namespaced_lease(NAMESPACE, label_selector=ROSTER_LABEL)
                assert sorted(m.spec.holder_identity for m in members.items) == ["e2e-0", "e2e-1"]
                for replica in replicas:
                    for spec in replica.manager.streams:
                        shard = shard_of(spec.stream.group, spec.stream.resource, SHARDS)
                        assert expected[shard] == replica.manager.identity

                await replicas[0].stop()

                async def all_on_one() -> bool:
                    return set((await shard_holders()).values()) == {"e2e-1"}

                await wait_for(all_on_one, timeout_s=60, what="the hand-over to the replica left")
                members = await leases.list_namespaced_lease(NAMESPACE, label_selector=ROSTER_LABEL)
                assert [m.spec.holder_identity for m in members.items] == ["e2e-1"]  # deleted at stop
                await wait_for(
                    lambda: (
                        {s.stream.resource for s in replicas[1].manager.streams}
                        == {"configmaps", "services", "serviceaccounts", "deployments"}
                    ),
                    timeout_s=60,
                    what="every type on the replica left",
                )
            finally:
                for replica in replicas:
                    await replica.stop()
        finally:
            await log.close()
