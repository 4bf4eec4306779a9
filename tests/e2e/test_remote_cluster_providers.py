"""A ClusterProvider's remote cluster, end to end through `reverser run` on a real kube-apiserver.

gitops-reverser's way to mirror another cluster: a ClusterProvider `prod` whose
`spec.kubeConfig.secretRef` names a Secret of the controller's namespace; a GitTarget names it by
`clusterProviderRef`. The service reads the Secret through the API server, watches `prod` with the
provider's `qps`/`burst`, and commits its ConfigMaps. A second provider, `broken`, names a Secret
that does not exist: only its target stalls, and its rule status names the Secret. ("Remote" is the
same kube-apiserver reached through the Secret; a second control plane would add nothing the
client path does not already show.)
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.customresources.objects import GROUP, VERSION, Kind
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.e2e.test_remote_clusters import inline_kubeconfig
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

WAIT_S = 90.0
HOME = "reverser"  # the controller's namespace (custom_resources.namespace default)
SOURCE = "apps"


@dataclass(frozen=True, slots=True)
class Setup:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess


def _mirror(name: str, cluster: str, remote: GitRemote) -> list[dict[str, Any]]:
    target = {
        "providerRef": {"name": name},
        "branch": "main",
        "path": name,
        "clusterProviderRef": {"name": cluster},
    }
    rules = [{"resources": ["configmaps"], "sourceNamespace": SOURCE}]
    return [
        custom_object(
            "GitProvider",
            name,
            HOME,
            {
                "url": remote.url,
                "allowedBranches": ["main"],
                "push": {"commitWindow": "0s"},
                "pipeline": {"push_cooldown_s": 0.2},
            },
        ),
        custom_object("GitTarget", name, HOME, target),
        custom_object("WatchRule", name, HOME, {"targetRef": {"name": name}, "rules": rules}),
    ]


async def _prepare(plane: ControlPlane, remote: GitRemote) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        core = client.CoreV1Api(api)
        for namespace in (HOME, SOURCE):
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        kubeconfig = base64.b64encode(json.dumps(inline_kubeconfig(plane.kubeconfig)).encode()).decode()
        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(name="prod-kubeconfig"), data={"value": kubeconfig}
        )
        await core.create_namespaced_secret(HOME, secret)
        access = {"accessFrom": {"names": [HOME]}}
        prod = {**access, "kubeConfig": {"secretRef": {"name": "prod-kubeconfig"}}, "qps": 50, "burst": 100}
        await create(api, custom_object("ClusterProvider", "prod", "", prod))
        broken = {**access, "kubeConfig": {"secretRef": {"name": "missing-kubeconfig", "key": "config"}}}
        await create(api, custom_object("ClusterProvider", "broken", "", broken))
        for document in [*_mirror("prod", "prod", remote), *_mirror("other", "broken", remote)]:
            await create(api, document)
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"mode": "remote"})
        await core.create_namespaced_config_map(SOURCE, body)


@pytest.fixture(scope="module")
def setup(controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("remoteproviders")
    plane = ControlPlane(workdir / "plane", controlplane_bin_dir)
    remote = GitRemote(workdir / "remote.git")
    plane.start()
    try:
        asyncio.run(_prepare(plane, remote))
        service = ServiceProcess(workdir, service_config(workdir / "service", plane.kubeconfig))
        service.start()
        try:
            yield Setup(plane, remote, service)
        finally:
            code = service.stop()
            assert code in (0, None), f"reverser run exited with {code}:\n{service.log_tail()}"
    finally:
        plane.stop()


async def _rule_problems(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, HOME, Kind.WATCH_RULE.plural, name
        )
    assert isinstance(found, dict)
    return [p for rule in (found.get("status") or {}).get("rules", []) for p in rule["problems"]]


def test_the_remote_clusters_configmaps_are_mirrored_and_a_missing_secret_stalls_only_its_own(
    setup: Setup,
) -> None:
    setup.remote.wait_for(
        lambda r: "prod/apps/configmaps/settings.yaml" in r.files(), WAIT_S, "prod's ConfigMap in Git"
    )
    assert not [path for path in setup.remote.files() if path.startswith("other/")]

    async def stalled() -> bool:
        return bool(await _rule_problems(setup.plane, "other"))

    asyncio.run(wait_for(stalled, "the broken cluster's rule problem", timeout_s=WAIT_S))
    (problem,) = asyncio.run(_rule_problems(setup.plane, "other"))
    assert problem["reason"] == "ClusterUnavailable"
    assert "Secret reverser/missing-kubeconfig does not exist" in problem["message"]
    assert asyncio.run(_rule_problems(setup.plane, "prod")) == []


async def _validated(plane: ControlPlane, name: str) -> dict[str, Any]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, Kind.CLUSTER_PROVIDER.plural, name
        )
    assert isinstance(found, dict)
    conditions: dict[str, dict[str, Any]] = {
        c["type"]: c for c in (found.get("status") or {}).get("conditions", [])
    }
    return conditions.get("Validated", {})


def test_each_provider_says_whether_its_kubeconfig_secret_is_usable(setup: Setup) -> None:
    """gitops-reverser's `Validated` condition, written by the controller from the Secret as read."""

    async def both() -> bool:
        shown = [await _validated(setup.plane, name) for name in ("prod", "broken")]
        return all(c.get("status") in ("True", "False") for c in shown)

    asyncio.run(wait_for(both, "Validated on both providers", timeout_s=WAIT_S))
    prod = asyncio.run(_validated(setup.plane, "prod"))
    assert (prod["status"], prod["reason"]) == ("True", "Validated")
    broken = asyncio.run(_validated(setup.plane, "broken"))
    assert (broken["status"], broken["reason"]) == ("False", "KubeConfigSecretNotFound")
    assert broken["message"] == "Secret reverser/missing-kubeconfig does not exist"
