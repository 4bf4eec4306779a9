"""Wildcard rule entries expand against discovery (pure: a discovery map, no server).

`*` (every resource of every group), `group/*` (`/*`: the core group), `*/resource` (one resource in
every group). Types the rule could not watch anyway (Secrets without encryption, the denylist,
types without list/watch, the other scope) are left out; an entry matching nothing is `Unknown`.
"""

from __future__ import annotations

from pipeline.audit.scope import watched_types
from pipeline.config import (
    ClusterSettings,
    EncryptionSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.kube.client import ApiResource
from pipeline.models import GroupResource
from pipeline.targetrules import TargetRules, wildcard_matches
from pipeline.watch.resolve import resolve_target

VERBS = frozenset({"get", "list", "watch"})
DISCOVERY = {
    (api.group, api.resource): api
    for api in (
        ApiResource("", "v1", "configmaps", "ConfigMap", True, VERBS),
        ApiResource("", "v1", "secrets", "Secret", True, VERBS),
        ApiResource("", "v1", "pods", "Pod", True, VERBS),  # denylisted
        ApiResource("", "v1", "namespaces", "Namespace", False, VERBS),
        ApiResource("", "v1", "bindings", "Binding", True, frozenset({"create"})),  # not watchable
        ApiResource("apps", "v1", "deployments", "Deployment", True, VERBS),
        ApiResource("apps", "v1", "statefulsets", "StatefulSet", True, VERBS),
        ApiResource("example.com", "v1", "configmaps", "ConfigMap", True, VERBS),
        ApiResource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, VERBS),
    )
}
CLUSTER = ClusterSettings(name="c")
AGE = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"


def _streams(
    *rules: WatchRule, encrypted: bool = False
) -> tuple[list[tuple[str, str, str]], list[tuple[int, str]]]:
    target = TargetSettings(
        name="t",
        provider="p",
        rules=list(rules),
        encryption=EncryptionSettings(age_recipients=[AGE]) if encrypted else None,
    )
    specs, problems = resolve_target(target, CLUSTER, DISCOVERY)
    return [(s.stream.group, s.stream.resource, s.stream.scope) for s in specs], [
        (p.rule, p.reason) for p in problems
    ]


def test_star_in_namespaces_is_every_watchable_namespaced_type() -> None:
    streams, problems = _streams(WatchRule(resources=["*"], namespaces=["team-a"]))
    assert streams == [
        ("", "configmaps", "team-a"),
        ("apps", "deployments", "team-a"),
        ("apps", "statefulsets", "team-a"),
        ("example.com", "configmaps", "team-a"),
    ]
    assert problems == []


def test_star_with_encryption_takes_secrets_too() -> None:
    streams, _ = _streams(WatchRule(resources=["/*"], namespaces=["a"]), encrypted=True)
    assert streams == [("", "configmaps", "a"), ("", "secrets", "a")]


def test_group_star_core_star_and_star_resource() -> None:
    assert _streams(WatchRule(resources=["apps/*"], namespaces=["a"]))[0] == [
        ("apps", "deployments", "a"),
        ("apps", "statefulsets", "a"),
    ]
    assert _streams(WatchRule(resources=["/*"], namespaces=["a"]))[0] == [("", "configmaps", "a")]
    assert _streams(WatchRule(resources=["*/configmaps"], namespaces=["a"]))[0] == [
        ("", "configmaps", "a"),
        ("example.com", "configmaps", "a"),
    ]


def test_a_cluster_scoped_rule_expands_to_cluster_scoped_types_and_cluster_wide_to_both() -> None:
    assert _streams(WatchRule(resources=["*"]))[0] == [
        ("", "namespaces", ""),
        ("rbac.authorization.k8s.io", "clusterroles", ""),
    ]
    wide, _ = _streams(WatchRule(resources=["*"], cluster_wide=True))
    assert ("", "namespaces", "") in wide
    assert ("apps", "deployments", "") in wide


def test_a_pattern_matching_nothing_is_unknown_and_overlaps_dedupe() -> None:
    streams, problems = _streams(
        WatchRule(resources=["batch/*"], namespaces=["a"]),
        WatchRule(resources=["apps/*", "apps/deployments"], namespaces=["a"]),
    )
    assert problems == [(0, "Unknown")]
    assert streams == [("apps", "deployments", "a"), ("apps", "statefulsets", "a")]


def test_the_audit_ingress_keeps_the_facts_a_pattern_watches() -> None:
    settings = Settings(
        clusters=[CLUSTER],
        providers=[ProviderSettings(name="p", url="/srv/g")],
        targets=[
            TargetSettings(
                name="t",
                provider="p",
                cluster="c",
                rules=[WatchRule(resources=["apps/*", "*/configmaps"], namespaces=["a"])],
            )
        ],
    )
    watched = watched_types(settings)["c"]
    assert watched.covers(GroupResource("apps", "statefulsets"))
    assert watched.covers(GroupResource("example.com", "configmaps"))
    assert not watched.covers(GroupResource("batch", "jobs"))
    assert wildcard_matches("*", GroupResource("batch", "jobs"))
    assert not wildcard_matches("/*", GroupResource("apps", "deployments"))


def test_a_replay_selects_objects_by_the_same_patterns() -> None:
    rules = TargetRules.of(
        TargetSettings(
            name="t", provider="p", rules=[WatchRule(resources=["apps/*", "*/configmaps"], namespaces=["a"])]
        )
    )
    assert rules.selects(GroupResource("apps", "statefulsets"), "a", {})
    assert rules.selects(GroupResource("example.com", "configmaps"), "a", {})
    assert not rules.selects(GroupResource("apps", "statefulsets"), "b", {})
    assert not rules.selects(GroupResource("", "secrets"), "a", {})
    everything = TargetRules.of(
        TargetSettings(name="t", provider="p", rules=[WatchRule(resources=["*"], namespaces=["a"])])
    )
    assert everything.selects(GroupResource("batch.example.com", "things"), "a", {})
    assert not everything.selects(GroupResource("", "pods"), "a", {})  # denylisted
