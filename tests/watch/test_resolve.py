"""Rule resolution through API discovery served over HTTP by the test server."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.config import ClusterSettings, WatchRule
from pipeline.kube.client import KubeError, open_client
from pipeline.watch.resolve import resolve_target
from tests.watch.conftest import rule, target
from tests.watch.kube_server import FakeKubeApiServer


async def test_discovery_then_resolution(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    cluster = ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path), audit_route="edge")
    client = await open_client(cluster)
    try:
        discovered = await client.discover()
        assert ("", "configmaps/status") not in discovered
        assert discovered[("apps", "deployments")].version == "v1"
        assert discovered[("wardle.example.com", "flunders")].version == "v1alpha1"
        specs, problems = resolve_target(
            target(
                "t1",
                rule("configmaps", "flunders", "one.example.com/widgets", namespaces=("b", "a")),
                rule("clusterroles"),
                rule("apps/deployments", cluster_wide=True, selector="app=web"),
                rule("configmaps", namespaces=("a",), selector="tier=x"),
            ),
            cluster,
            discovered,
        )
        assert [(s.stream.group, s.stream.resource, s.stream.scope) for s in specs] == [
            ("", "configmaps", "a"),
            ("", "configmaps", "b"),
            ("apps", "deployments", ""),
            ("one.example.com", "widgets", "a"),
            ("one.example.com", "widgets", "b"),
            ("rbac.authorization.k8s.io", "clusterroles", ""),
            ("wardle.example.com", "flunders", "a"),
            ("wardle.example.com", "flunders", "b"),
        ]
        assert {s.route for s in specs} == {"edge"}
        assert next(s for s in specs if s.stream.resource == "deployments").label_selector == "app=web"
        assert [(p.rule, p.reason) for p in problems] == [(3, "SelectorConflict")]
        with pytest.raises(KubeError) as gone:
            await client.get_json("/api/v1/namespaces/nope")
        assert gone.value.not_found
        assert await client.namespace_phase("nope") is None
        assert await client.namespace_phase("default") == "Active"
    finally:
        await client.close()


async def test_unreachable_cluster_is_a_typed_error(tmp_path: Path) -> None:
    server = FakeKubeApiServer()
    await server.start()
    kubeconfig = server.kubeconfig(tmp_path)
    await server.stop()
    client = await open_client(ClusterSettings(name="src", kubeconfig=kubeconfig))
    try:
        with pytest.raises(KubeError) as failure:
            await client.discover()
        assert failure.value.reason == "Unreachable"
    finally:
        await client.close()


def test_cluster_scoped_resource_with_namespaces_is_a_problem() -> None:
    from pipeline.kube.client import ApiResource

    discovered = {
        ("", "namespaces"): ApiResource(
            "", "v1", "namespaces", "Namespace", False, frozenset({"get", "list", "watch"})
        )
    }
    specs, problems = resolve_target(
        target("t1", rule("namespaces", namespaces=("a",))), ClusterSettings(name="src"), discovered
    )
    assert specs == []
    assert [p.reason for p in problems] == ["ScopeMismatch"]


def test_rule_validation_names_the_problem() -> None:
    with pytest.raises(ValidationError, match="not both"):
        WatchRule(resources=["configmaps"], namespaces=["a"], cluster_wide=True)
    with pytest.raises(ValidationError, match="resources"):
        WatchRule(resources=["apps/v1/deployments"])
    with pytest.raises(ValidationError, match="resources"):
        WatchRule(resources=[])


def test_a_rules_versions_pick_the_served_version_it_names_first() -> None:
    from pipeline.kube.client import ApiResource

    verbs = frozenset({"get", "list", "watch"})
    hpa = ApiResource(
        "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, verbs, ("v2", "v1")
    )
    discovered = {("autoscaling", "horizontalpodautoscalers"): hpa}

    def resolved(*versions: str) -> tuple[list[str], list[tuple[str, str]]]:
        watch = WatchRule(
            resources=["autoscaling/horizontalpodautoscalers"], namespaces=["a"], versions=list(versions)
        )
        specs, problems = resolve_target(target("t1", watch), ClusterSettings(name="src"), discovered)
        return [s.stream.version for s in specs], [(p.reason, p.message) for p in problems]

    assert resolved() == (["v2"], [])
    assert resolved("v1") == (["v1"], [])
    assert resolved("v3beta1", "v1", "v2") == (["v1"], [])
    versions, problems = resolved("v3")
    assert versions == []
    assert problems == [("VersionNotServed", "autoscaling serves v2, v1, none of v3")]
    with pytest.raises(ValidationError, match="versions"):
        WatchRule(resources=["configmaps"], versions=["1"])


async def test_discovery_records_every_served_version_preferred_first(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    try:
        discovered = await client.discover()
    finally:
        await client.close()
    assert discovered[("", "configmaps")].served == ("v1",)
    assert discovered[("apps", "deployments")].served[0] == "v1"
