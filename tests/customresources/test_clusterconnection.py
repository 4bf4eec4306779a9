"""ClusterProviders as source clusters (gitops-reverser's `kubeConfig`, `qps`/`burst` and
`attribution.auditRoute`): how they change or add the file's clusters, what they refuse by field,
and that the clusters travel with the published version. Pure: compiled offline, no apiserver."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest

from pipeline.codec import SCHEMA_HEADER
from pipeline.codec.config_state import decode_config_state
from pipeline.config import ClusterSettings, KubeconfigSecretReference, Settings
from pipeline.customresources.compile import CompiledConfig, compile_resources
from pipeline.customresources.objects import Kind, ObjectRef, parse_object
from pipeline.customresources.state import ConfigState, decode_state, encode_state
from pipeline.log.api import Record

HOME = "reverser"
API = "configbutler.ai/v1alpha3"
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
BASE = Settings(
    clusters=[
        {"name": "home", "in_cluster": True, "leader_election": True, "lease_duration_s": 20},
        {"name": "file-remote", "kubeconfig": "/etc/reverser/remote.kubeconfig", "context": "ops"},
    ],
    custom_resources={"enabled": True, "namespace": HOME},
)


def _provider(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ClusterProvider", "metadata": {"name": name}, "spec": spec}


def _mirror(cluster: str) -> list[dict[str, Any]]:
    """A GitProvider, a GitTarget on `cluster` and a WatchRule in the controller's namespace."""

    def obj(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": API,
            "kind": kind,
            "metadata": {"name": "apps", "namespace": HOME},
            "spec": spec,
        }

    return [
        obj("GitProvider", {"url": "https://git.example.com/a.git", "allowedBranches": ["main"]}),
        obj(
            "GitTarget",
            {
                "providerRef": {"name": "apps"},
                "branch": "main",
                "path": "apps",
                "clusterProviderRef": {"name": cluster},
            },
        ),
        obj("WatchRule", {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]}),
    ]


def _compiled(*documents: dict[str, Any], base: Settings = BASE) -> CompiledConfig:
    return compile_resources([parse_object(d) for d in documents], home_namespace=HOME, base=base)


def _cluster(compiled: CompiledConfig, name: str) -> ClusterSettings:
    (found,) = [c for c in compiled.settings(BASE).clusters if c.name == name]
    return found


def _report(compiled: CompiledConfig, name: str) -> tuple[list[tuple[str, str]], list[str]]:
    report = compiled.reports[ObjectRef(Kind.CLUSTER_PROVIDER, "", name)]
    return [(e.path, e.message) for e in report.errors], report.unsupported


def test_a_kubeconfig_secret_adds_a_remote_cluster_that_targets_can_name() -> None:
    compiled = _compiled(
        _provider(
            "prod-eu-1",
            {
                "kubeConfig": {"secretRef": {"name": "prod-eu-1-kubeconfig"}},
                "accessFrom": {"names": [HOME]},
                "qps": 20,
                "burst": 40,
            },
        ),
        *_mirror("prod-eu-1"),
    )
    assert _report(compiled, "prod-eu-1") == ([], [])
    assert [t.cluster for t in compiled.targets] == ["prod-eu-1"]
    cluster = _cluster(compiled, "prod-eu-1")
    # resolved from the controller's namespace, Flux's default key order (no key)
    assert cluster.kubeconfig_secret == KubeconfigSecretReference(namespace=HOME, name="prod-eu-1-kubeconfig")
    assert (cluster.qps, cluster.effective_burst) == (20, 40)
    assert (cluster.kubeconfig, cluster.in_cluster, cluster.route) == (None, False, "prod-eu-1")
    # an added cluster takes the home cluster's election, so several replicas keep one watcher
    assert (cluster.leader_election, cluster.lease_duration_s) == (True, 20)


def test_a_kubeconfig_secret_replaces_the_file_clusters_connection() -> None:
    compiled = _compiled(
        _provider("file-remote", {"kubeConfig": {"secretRef": {"name": "remote", "key": "config"}}})
    )
    cluster = _cluster(compiled, "file-remote")
    assert cluster.kubeconfig_secret == KubeconfigSecretReference(namespace=HOME, name="remote", key="config")
    assert (cluster.kubeconfig, cluster.context) == (None, None)
    # the file's other clusters stand as written
    assert _cluster(compiled, "home") == BASE.clusters[0]


def test_an_audit_route_maps_onto_the_clusters_route() -> None:
    compiled = _compiled(
        _provider("home", {"attribution": {"auditRoute": "shared.route"}}),
        _provider("srcns-delegating", {"attribution": {"auditRoute": "home"}}),
        _provider("unrouted", {"attribution": {"auditRoute": ""}}),
    )
    assert _cluster(compiled, "home").route == "shared.route"
    # an in-cluster provider of another name is a second name for the home cluster, on GR's route
    delegating = _cluster(compiled, "srcns-delegating")
    assert (delegating.in_cluster, delegating.route) == (True, "home")
    assert _cluster(compiled, "unrouted").route == "unrouted"  # empty: the provider's name


def test_without_kubeconfig_qps_and_burst_are_ignored_as_in_gitops_reverser() -> None:
    compiled = _compiled(_provider("home", {"qps": 5, "burst": 10}))
    assert _report(compiled, "home") == ([], ["spec.qps", "spec.burst"])
    assert _cluster(compiled, "home").qps is None


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"kubeConfig": {"configMapRef": {"name": "x"}}}, "spec.kubeConfig.configMapRef", "use secretRef"),
        ({"kubeConfig": {"secretRef": {"name": ""}}}, "spec.kubeConfig.secretRef.name", "must name"),
        (
            {"kubeConfig": {"secretRef": {"name": "k", "key": 3}}},
            "spec.kubeConfig.secretRef.key",
            "Secret key",
        ),
        ({"kubeConfig": {"secretRef": {"name": "k"}}, "qps": 0}, "spec.qps", ">= 1"),
        ({"kubeConfig": {"secretRef": {"name": "k"}}, "burst": "10"}, "spec.burst", ">= 1"),
        ({"attribution": {"auditRoute": "Prod_EU"}}, "spec.attribution.auditRoute", "DNS subdomain"),
    ],
)
def test_bad_fields_are_refused_at_the_field(spec: dict[str, Any], path: str, message: str) -> None:
    compiled = _compiled(_provider("prod-eu-1", spec))
    errors, _ = _report(compiled, "prod-eu-1")
    assert [p for p, _ in errors] == [path]
    assert message in errors[0][1]
    assert "prod-eu-1" not in {c.name for c in compiled.clusters}


def test_the_custom_resources_cluster_cannot_be_remote() -> None:
    errors, _ = _report(_compiled(_provider("home", {"kubeConfig": {"secretRef": {"name": "k"}}})), "home")
    assert errors == [
        (
            "spec.kubeConfig",
            "cluster home is where the custom resources and the kubeconfig Secrets are read from; it "
            "cannot itself be reached through a Secret",
        )
    ]


def test_offline_without_clusters_nothing_is_added() -> None:
    compiled = _compiled(_provider("p", {"kubeConfig": {"secretRef": {"name": "k"}}}), base=Settings())
    assert _report(compiled, "p") == ([], [])
    assert compiled.clusters == []


def test_the_clusters_travel_with_the_published_version() -> None:
    compiled = _compiled(
        _provider("prod-eu-1", {"kubeConfig": {"secretRef": {"name": "k"}}, "qps": 3}), *_mirror("prod-eu-1")
    )
    pending = encode_state(ConfigState(7, 1000, compiled))
    assert dict(pending.headers)[SCHEMA_HEADER] == b"config_state/2"
    back = decode_state(Record("c", 0, 5, 0, pending.key, pending.value, pending.headers))
    assert back.compiled.clusters == compiled.clusters
    assert back.settings(BASE) == compiled.settings(BASE)


def test_a_version_1_record_reads_as_no_clusters() -> None:
    compiled = _compiled(*_mirror("home"))
    pending = encode_state(ConfigState(3, 1000, compiled))
    current = decode_config_state(Record("c", 0, 1, 0, pending.key, pending.value, pending.headers))
    v1 = fastavro.schema.load_schema(str(SCHEMAS / "history" / "config_state.v1.avsc"))
    written = current.to_avro()
    del written["clusters"]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, v1, written)
    old = Record("c", 0, 1, 0, pending.key, out.getvalue(), ((SCHEMA_HEADER, b"config_state/1"),))
    assert decode_state(old).compiled.clusters == []
    assert replace(decode_config_state(old), clusters=current.clusters) == current


def test_the_first_file_cluster_may_be_remote_when_another_holds_the_custom_resources() -> None:
    base = Settings(
        clusters=[{"name": "edge"}, {"name": "home", "in_cluster": True}],
        custom_resources={"enabled": True, "namespace": HOME, "cluster": "home"},
    )
    compiled = _compiled(
        _provider("edge", {"kubeConfig": {"secretRef": {"name": "k"}}, "accessFrom": {"names": [HOME]}}),
        *_mirror("edge"),
        base=base,
    )
    assert _report(compiled, "edge") == ([], [])
    assert [t.cluster for t in compiled.targets] == ["edge"]
