"""The configbutler.ai CRDs on a real kube-apiserver (`make e2e`; `plane` from tests/e2e/conftest.py).

gitops-reverser objects apply unchanged, fields this project does not know are stored (not pruned)
so the controller can report them, and what the schema requires is refused by the apiserver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import GROUP, VERSION, Kind, parse_object
from tests.customresources.test_compile import UPSTREAM
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "charts" / "reverser-pipeline" / "crds"


async def install_crds(api: client.ApiClient) -> None:
    """Create the four CRDs (as `kubectl apply -f crds/` would) and wait until they are served."""
    extensions = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        try:
            await extensions.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    async def established() -> bool:
        for name in names:
            crd = await extensions.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in crd.status.conditions or []}
            if conditions.get("Established") != "True":
                return False
        return True

    await wait_for(established, "the CRDs to be established", timeout_s=60)


def service_config(workdir: Path, kubeconfig: Path, **cluster: Any) -> dict[str, Any]:
    """`reverser run` on the embedded log with custom resources from the `default` cluster."""
    return {
        "workdir": str(workdir),
        "log": {"backend": "embedded", "fsync": False},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"addr": f"127.0.0.1:{free_port()}", "allow_plain_http": True},
        "attribution": {"grace_ms": 100, "max_wait_ms": 300},
        "clusters": [
            {"name": "default", "kubeconfig": str(kubeconfig), "lease_namespace": "default", **cluster}
        ],
        "custom_resources": {"enabled": True},
        "lag": {"enabled": False},
    }


def custom_object(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A `configbutler.ai` object as a user would apply it (namespace ignored by cluster kinds)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


async def create(api: client.ApiClient, document: dict[str, Any]) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    kind = Kind(document["kind"])
    namespace = document["metadata"].get("namespace")
    if kind.namespaced:
        created = await custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, kind.plural, document
        )
    else:
        created = await custom.create_cluster_custom_object(GROUP, VERSION, kind.plural, document)
    assert isinstance(created, dict)
    return created


async def test_upstream_objects_apply_unchanged_and_keep_unsupported_fields(plane: ControlPlane) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="team-a"))
        )
        documents = [d for d in yaml.safe_load_all(UPSTREAM) if d]
        for document in documents:
            document["metadata"].pop("generation")
        stored = [await create(api, document) for document in documents]
        provider = next(s for s in stored if s["kind"] == "GitProvider")
        assert provider["spec"]["secretRef"] == {"name": "git-creds"}
        assert provider["spec"]["commit"]["message"] == {"eventTemplate": "[{{.Operation}}] {{.Name}}"}
        target = next(s for s in stored if s["kind"] == "GitTarget")
        assert target["spec"]["placement"] == {"default": "{namespace}/{name}.yaml"}
        compiled = compile_resources([parse_object(s) for s in stored], home_namespace="reverser")
        assert compiled.errors == []
        assert {ref.kind: r.generation for ref, r in compiled.reports.items()} == dict.fromkeys(Kind, 1)
        assert [t.name for t in compiled.targets] == ["team-a/apps"]

        refused = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "WatchRule",
            "metadata": {"name": "bad", "namespace": "team-a"},
            "spec": {"targetRef": {"name": "apps"}, "rules": [{"resources": ["pods/log"]}]},
        }
        with pytest.raises(ApiException) as caught:
            await create(api, refused)
        assert caught.value.status == 422
        assert "spec.rules[0].resources[0]" in str(caught.value.body)
        no_provider = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GitTarget",
            "metadata": {"name": "orphan", "namespace": "team-a"},
            "spec": {"branch": "main", "path": "x"},
        }
        with pytest.raises(ApiException) as caught:
            await create(api, no_provider)
        assert "spec.providerRef.name names the GitProvider" in str(caught.value.body)
