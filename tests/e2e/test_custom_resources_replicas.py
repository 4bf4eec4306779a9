"""Two `reverser run` replicas on Kafka with custom resources (`make e2e`).

One replica wins the `reverser-config` Lease and publishes; both run the version they read from the
log. SIGKILL of the publishing replica hands the Lease to the other, which publishes the next
change (after fencing the dead one's producer), and the survivor applies it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.customresources.objects import GROUP, VERSION, Kind
from tests.conftest import unique_prefix
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "reverser"  # the controller's namespace: names stay as written
WAIT_S = 120.0


def _replica(workdir: Path, plane: ControlPlane, bootstrap: str, prefix: str) -> ServiceProcess:
    workdir.mkdir()
    return ServiceProcess(
        workdir,
        {
            "workdir": str(workdir / "service"),
            "log": {"backend": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": prefix},
            "metrics": {"addr": f"127.0.0.1:{free_port()}"},
            "audit": {"addr": f"127.0.0.1:{free_port()}", "allow_plain_http": True},
            "attribution": {"grace_ms": 100, "max_wait_ms": 300},
            "clusters": [
                {
                    "name": "default",
                    "kubeconfig": str(plane.kubeconfig),
                    "leader_election": True,
                    "lease_namespace": "default",
                    "lease_duration_s": 3,
                    "lease_renew_s": 0.5,
                }
            ],
            "custom_resources": {"enabled": True},
            "lag": {"enabled": False},
        },
        log_level="INFO",
    )


def _objects(remote: GitRemote) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, NAMESPACE, spec)

    return [
        obj(
            "GitProvider",
            "repo",
            {"url": remote.url, "allowedBranches": ["main"], "push": {"commitWindow": "0s"}},
        ),
        obj("GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "main", "path": "apps"}),
        obj("WatchRule", "apps", {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]}),
    ]


async def _prepare(plane: ControlPlane, remote: GitRemote) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )
        for document in _objects(remote):
            await create(api, document)


def _version(replica: ServiceProcess) -> float:
    return replica.metric_sum("reverser_config_version")


async def test_the_lease_holder_publishes_and_every_replica_applies_from_the_log(
    controlplane_bin_dir: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    plane = ControlPlane(tmp_path / "plane", controlplane_bin_dir)
    remote = GitRemote(tmp_path / "remote.git")
    plane.start()
    replicas: list[ServiceProcess] = []
    try:
        await _prepare(plane, remote)
        prefix = unique_prefix()
        replicas = [_replica(tmp_path / f"r{i}", plane, kafka_bootstrap, prefix) for i in range(2)]
        for replica in replicas:
            replica.start()
        await wait_for(
            lambda: all(_version(r) >= 1 for r in replicas), "both replicas on version 1", timeout_s=WAIT_S
        )
        assert {_version(r) for r in replicas} == {1.0}

        async with kube_client(plane.kubeconfig) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(
                NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-one"), data={"v": "1"})
            )
        await asyncio.to_thread(
            remote.wait_for,
            lambda r: "apps/reverser/configmaps/cm-one.yaml" in r.files(),
            WAIT_S,
            "cm-one in Git",
        )

        # the publisher is the replica whose log says it took the Lease
        leader = next(
            r for r in replicas if "lease default/reverser-config acquired" in r.log_path.read_text()
        )
        survivor = next(r for r in replicas if r is not leader)
        leader.kill()
        async with kube_client(plane.kubeconfig) as api:
            await client.CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP,
                VERSION,
                NAMESPACE,
                Kind.WATCH_RULE.plural,
                "apps",
                [
                    {
                        "op": "add",
                        "path": "/spec/rules/-",
                        "value": {"apiGroups": ["apps"], "resources": ["deployments"]},
                    }
                ],
            )
        await wait_for(
            lambda: _version(survivor) >= 2, "the survivor to publish and apply version 2", timeout_s=WAIT_S
        )
        assert "lease default/reverser-config acquired" in survivor.log_path.read_text()
        # the survivor watches, routes and commits alone now
        async with kube_client(plane.kubeconfig) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(
                NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-two"), data={"v": "2"})
            )
        await asyncio.to_thread(
            remote.wait_for,
            lambda r: "apps/reverser/configmaps/cm-two.yaml" in r.files(),
            WAIT_S,
            "cm-two in Git",
        )
    finally:
        for replica in replicas:
            code = replica.stop()
            assert code in (0, None), replica.log_tail()
        plane.stop()
