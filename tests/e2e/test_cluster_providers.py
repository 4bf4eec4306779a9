"""ClusterProvider authorization on a real kube-apiserver (`make e2e`).

A ClusterProvider `default` admits team-a only and delegates the source-namespace choice; team-a's
GitTarget lists `shared` in `allowedSourceNamespaces`, so its WatchRule mirrors `shared`'s
ConfigMaps. team-b's GitTarget is refused (its namespace is not admitted), and team-a's item that
names `other` (not in the policy) gets no stream; both say why in their status. The provider
also admits by label (`tier: trusted`): team-c, labelled so, is mirrored, and team-b is once it
is relabelled (the controller lists the Namespaces' labels again every 30 s).
"""

from __future__ import annotations

import asyncio
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
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

WAIT_S = 90.0


@dataclass(frozen=True, slots=True)
class Setup:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess


def _tenant(
    namespace: str, remote: GitRemote, sources: list[str], allowed: list[str]
) -> list[dict[str, Any]]:
    target: dict[str, Any] = {"providerRef": {"name": "repo"}, "branch": "main", "path": namespace}
    target["allowedSourceNamespaces"] = {"names": allowed}
    items = [{"resources": ["configmaps"], "sourceNamespace": source} for source in sources]
    return [
        custom_object(
            "GitProvider",
            "repo",
            namespace,
            {
                "url": remote.url,
                "allowedBranches": ["main"],
                "push": {"commitWindow": "0s"},
                "pipeline": {"push_cooldown_s": 0.2},
            },
        ),
        custom_object("GitTarget", "apps", namespace, target),
        custom_object("WatchRule", "apps", namespace, {"targetRef": {"name": "apps"}, "rules": items}),
    ]


@pytest.fixture(scope="module")
def setup(controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("clusterproviders")
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


async def _prepare(plane: ControlPlane, remote: GitRemote) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        core = client.CoreV1Api(api)
        for namespace in ("team-a", "team-b", "shared", "other"):
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        trusted = client.V1ObjectMeta(name="team-c", labels={"tier": "trusted"})
        await core.create_namespace(client.V1Namespace(metadata=trusted))
        provider = {
            "allowedNamespaces": {"names": ["team-a"], "selector": {"matchLabels": {"tier": "trusted"}}},
            "allowSourceNamespaceOverride": True,
        }
        await create(api, custom_object("ClusterProvider", "default", "", provider))
        documents = [
            *_tenant("team-a", remote, ["shared", "other"], ["shared"]),
            *_tenant("team-b", remote, ["team-b"], ["team-b"]),
            *_tenant("team-c", remote, ["team-c"], ["team-c"]),
        ]
        for document in documents:
            await create(api, document)
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"mode": "shared"})
        await core.create_namespaced_config_map("shared", body)
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="secretive"), data={"mode": "other"})
        await core.create_namespaced_config_map("other", body)
        for namespace in ("team-b", "team-c"):
            body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="own"), data={"team": namespace})
            await core.create_namespaced_config_map(namespace, body)


async def _get(plane: ControlPlane, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, kind.plural, name
        )
    assert isinstance(found, dict)
    return found


def _ready(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


def test_a_delegated_source_namespace_is_mirrored_and_the_rest_refused(setup: Setup) -> None:
    remote = setup.remote
    remote.wait_for(
        lambda r: "team-a/shared/configmaps/settings.yaml" in r.files(), WAIT_S, "shared's ConfigMap in Git"
    )
    assert not [path for path in remote.files() if "other/" in path or path.startswith("team-b/")]

    async def statuses() -> bool:
        target = await _get(setup.plane, Kind.GIT_TARGET, "team-b", "apps")
        rule = await _get(setup.plane, Kind.WATCH_RULE, "team-a", "apps")
        problems = [p for r in (rule.get("status") or {}).get("rules", []) for p in r["problems"]]
        return _ready(target).get("status") == "False" and bool(problems)

    asyncio.run(wait_for(statuses, "the refusals in status", timeout_s=WAIT_S))
    target = asyncio.run(_get(setup.plane, Kind.GIT_TARGET, "team-b", "apps"))
    assert (
        "ClusterProvider default: 'team-b' is not in spec.allowedNamespaces.names, and its labels do "
        "not match spec.allowedNamespaces.selector (tier=trusted)" in _ready(target)["message"]
    )
    rule = asyncio.run(_get(setup.plane, Kind.WATCH_RULE, "team-a", "apps"))
    (shared, other) = rule["status"]["rules"]
    assert shared["streams"] == ["v1/configmaps in shared"]
    (problem,) = other["problems"]
    assert problem["reason"] == "SourceNamespaceForbidden"
    assert "'other' is not in spec.allowedSourceNamespaces.names" in problem["message"]
    provider = asyncio.run(_cluster_provider(setup.plane))
    assert _ready(provider).get("status") == "True"


async def _cluster_provider(plane: ControlPlane) -> dict[str, Any]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, Kind.CLUSTER_PROVIDER.plural, "default"
        )
    assert isinstance(found, dict)
    return found


def test_namespaces_are_admitted_by_their_labels_and_a_relabel_takes_effect(setup: Setup) -> None:
    remote = setup.remote
    remote.wait_for(lambda r: "team-c/team-c/configmaps/own.yaml" in r.files(), WAIT_S, "team-c by label")
    assert not [path for path in remote.files() if path.startswith("team-b/")]

    async def relabel() -> None:
        async with kube_client(setup.plane.kubeconfig) as api:
            patch = {"metadata": {"labels": {"tier": "trusted"}}}
            await client.CoreV1Api(api).patch_namespace("team-b", patch)

    asyncio.run(relabel())
    # no object changed: only the controller's periodic list of the Namespaces sees the new label
    remote.wait_for(
        lambda r: "team-b/team-b/configmaps/own.yaml" in r.files(), WAIT_S, "team-b once relabelled"
    )
