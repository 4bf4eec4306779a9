"""The configbutler.ai CRDs on a real kube-apiserver (`make e2e`; `plane` from tests/e2e/conftest.py).

gitops-reverser objects apply unchanged, fields this project does not know are stored (not pruned)
so the controller can report them, and what the schema requires is refused by the apiserver. A YAML
file's `reverser config export`, applied and read back through the apiserver (its schema defaulting
and pruning included), routes exactly as the file does against the apiserver's own discovery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from pipeline.config import ClusterSettings, Settings, load_settings
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.export import export_resources
from pipeline.customresources.objects import GROUP, VERSION, Kind, parse_object
from pipeline.kube.client import ApiResource, open_client
from pipeline.kube.selector import parse_selector
from pipeline.router.component import destinations
from pipeline.watch.resolve import resolve_target
from tests.customresources.test_compile import SAMPLE, TENANTS, UPSTREAM
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


#: The platform's grant in these tests: any namespace may use the local test repositories, anywhere
#: in them (docs/security.md, Tenants).
LOCAL_TENANTS = [{"namespaces": ["*"], "url_prefixes": ["file:///"], "path_prefixes": ["."]}]


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
        "custom_resources": {"enabled": True, "tenants": LOCAL_TENANTS},
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
        assert target["spec"]["placement"] == {
            "default": "{namespace}/{name}.yaml",
            "byType": {"v1/secrets": "{namespace}/secrets/{name}.yaml"},
        }
        objects = [parse_object(s) for s in stored]
        compiled = compile_resources(objects, home_namespace="reverser", base=TENANTS)
        assert compiled.errors == []
        four = (Kind.GIT_PROVIDER, Kind.GIT_TARGET, Kind.WATCH_RULE, Kind.CLUSTER_WATCH_RULE)
        assert {ref.kind: r.generation for ref, r in compiled.reports.items()} == dict.fromkeys(four, 1)
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


def _streams(
    settings: Settings, discovered: dict[tuple[str, str], ApiResource]
) -> set[tuple[str, str, str, str, str, str]]:
    """(target, group, version, resource, scope, canonical selector) of every stream, and no problems."""
    found = set()
    for target in settings.targets:
        specs, problems = resolve_target(target, settings.clusters[0], discovered)
        assert problems == [], f"{target.name}: {problems}"
        for s in specs:
            selector = repr(sorted(map(str, parse_selector(s.label_selector).match_expressions())))
            found.add(
                (
                    s.stream.target,
                    s.stream.group,
                    s.stream.version,
                    s.stream.resource,
                    s.stream.scope,
                    selector,
                )
            )
    return found


async def test_an_exported_file_applied_through_the_apiserver_routes_as_the_file(
    plane: ControlPlane, tmp_path: Path
) -> None:
    home = "reverser-export"
    path = tmp_path / "config.yaml"
    path.write_text(SAMPLE.replace("/etc/reverser/prod.kubeconfig", str(plane.kubeconfig)))
    original = load_settings(path, environ={})
    documents = export_resources(original, home)
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=home))
        )
        # through YAML text, as `reverser config export | kubectl apply -f -` carries them
        stored = [await create(api, d) for d in yaml.safe_load_all(yaml.safe_dump_all(documents))]
    assert sorted(s["kind"] for s in stored) == sorted(d["kind"] for d in documents)
    compiled = compile_resources([parse_object(s) for s in stored], home_namespace=home, base=original)
    assert compiled.errors == []
    assert all(not r.unsupported for r in compiled.reports.values()), "the apiserver added nothing unknown"
    again = compiled.settings(original)

    kube = await open_client(ClusterSettings(name="prod-eu-1", kubeconfig=plane.kubeconfig))
    try:
        discovered = await kube.discover()
    finally:
        await kube.close()
    assert sorted(p.name for p in again.providers) == sorted(p.name for p in original.providers)
    assert sorted(again.providers, key=lambda p: p.name) == sorted(original.providers, key=lambda p: p.name)
    assert destinations(again) == destinations(original)
    streams = _streams(original, discovered)
    assert _streams(again, discovered) == streams
    assert {(t, g, r, scope) for t, g, _, r, scope, _ in streams} >= {
        ("prod-apps", "", "configmaps", "shop"),
        ("prod-apps", "apps", "deployments", "payments"),
        ("prod-apps", "rbac.authorization.k8s.io", "clusterroles", ""),
        ("staging", "", "secrets", "shop"),
    }
