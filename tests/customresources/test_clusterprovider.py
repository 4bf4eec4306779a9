"""ClusterProvider authorization as gitops-reverser defines it, inside this project's tenant boundary:
`allowedNamespaces` (deny by default) and the source-namespace delegation (`allowSourceNamespaceOverride`
with GitTarget `allowedSourceNamespaces`). Pure: compiled offline, no apiserver."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config import Settings
from pipeline.customresources.clusterprovider import ClusterProviders, NamespaceLabels
from pipeline.customresources.compile import ClusterReads, CompiledConfig, compile_resources
from pipeline.customresources.objects import Kind, ObjectRef, parse_object

HOME = "reverser"
API = "configbutler.ai/v1alpha3"
GRANT = {"namespaces": ["team-*"], "url_prefixes": ["https://git.example.com/"], "path_prefixes": ["."]}
TENANTS = Settings(custom_resources={"tenants": [GRANT]})


def _obj(kind: str, name: str, spec: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if kind != "ClusterProvider":
        metadata["namespace"] = namespace
    return {"apiVersion": API, "kind": kind, "metadata": metadata, "spec": spec}


def _provider(spec: dict[str, Any], name: str = "default") -> dict[str, Any]:
    return _obj("ClusterProvider", name, spec)


def _tenant(
    source: str | None = None, allowed: dict[str, Any] | None = None, namespace: str = "team-a"
) -> list[dict[str, Any]]:
    target: dict[str, Any] = {"providerRef": {"name": "repo"}, "branch": "main", "path": f"{namespace}/apps"}
    if allowed is not None:
        target["allowedSourceNamespaces"] = allowed
    item: dict[str, Any] = {"resources": ["configmaps"]}
    if source is not None:
        item["sourceNamespace"] = source
    return [
        _obj(
            "GitProvider",
            "repo",
            {"url": "https://git.example.com/a.git", "allowedBranches": ["main"]},
            namespace,
        ),
        _obj("GitTarget", "apps", target, namespace),
        _obj("WatchRule", "apps", {"targetRef": {"name": "apps"}, "rules": [item]}, namespace),
    ]


def _compiled(*documents: dict[str, Any], labels: NamespaceLabels = None) -> CompiledConfig:
    return compile_resources(
        [parse_object(d) for d in documents],
        home_namespace=HOME,
        base=TENANTS,
        reads=ClusterReads(namespace_labels=labels),
    )


def _namespaces(compiled: CompiledConfig, target: str = "team-a/apps") -> list[str]:
    (found,) = [t for t in compiled.targets if t.name == target]
    return [ns for rule in found.rules for ns in rule.namespaces]


def _refusal(compiled: CompiledConfig) -> str:
    (problem,) = compiled.item_problems
    assert problem.reason == "SourceNamespaceForbidden"
    return problem.message


def _target_error(compiled: CompiledConfig, namespace: str = "team-a") -> str:
    report = compiled.reports[ObjectRef(Kind.GIT_TARGET, namespace, "apps")]
    (error,) = report.errors
    assert error.path == "spec.clusterProviderRef.name"
    return error.message


def test_gitops_reversers_sample_is_read_and_its_fields_reported() -> None:
    compiled = _compiled(
        _provider({"allowedNamespaces": {"names": ["team-a"]}}),
        _provider(
            {
                "kubeConfig": {"secretRef": {"name": "prod-eu-1-kubeconfig"}},
                "allowedNamespaces": {"selector": {"matchLabels": {"tier": "trusted"}}},
            },
            "prod-eu-1",
        ),
    )
    default = compiled.reports[ObjectRef(Kind.CLUSTER_PROVIDER, "", "default")]
    remote = compiled.reports[ObjectRef(Kind.CLUSTER_PROVIDER, "", "prod-eu-1")]
    assert default.errors == []
    assert default.unsupported == []
    assert remote.errors == []
    assert remote.unsupported == []  # its kubeConfig is read (test_clusterconnection.py)


def test_without_a_cluster_provider_the_files_clusters_decide_as_before() -> None:
    assert _namespaces(_compiled(*_tenant())) == ["team-a"]
    assert "default" in _refusal(_compiled(*_tenant(source="team-b")))


def test_allowed_namespaces_admits_only_what_it_lists() -> None:
    admitted = _compiled(_provider({"allowedNamespaces": {"names": ["team-a"]}}), *_tenant())
    assert _namespaces(admitted) == ["team-a"]
    other = _compiled(_provider({"allowedNamespaces": {"names": ["team-b"]}}), *_tenant())
    assert "'team-a' is not in spec.allowedNamespaces.names" in _target_error(other)
    silent = _compiled(_provider({}), *_tenant())
    assert "declares no spec.allowedNamespaces" in _target_error(silent)
    empty = _compiled(_provider({"allowedNamespaces": {}}), *_tenant())
    assert "is not in spec.allowedNamespaces.names" in _target_error(empty), (
        "declared but empty admits nothing"
    )
    selector = _compiled(
        _provider({"allowedNamespaces": {"selector": {"matchLabels": {"a": "b"}}}}), *_tenant()
    )
    unread = "the Namespace labels spec.allowedNamespaces.selector needs could not be read"
    assert unread in _target_error(selector)
    later = _compiled(_provider({"accessFrom": {"names": ["team-a"]}}), *_tenant())
    assert _namespaces(later) == ["team-a"], "the later release's spelling"


def test_an_override_needs_the_delegation_and_the_targets_policy() -> None:
    delegating = {"allowedNamespaces": {"names": ["team-a"]}, "allowSourceNamespaceOverride": True}
    allowed = {"names": ["shared"]}
    assert _namespaces(_compiled(_provider(delegating), *_tenant("shared", allowed))) == ["shared"]
    not_delegating = {"allowedNamespaces": {"names": ["team-a"]}}
    assert "does not set spec.allowSourceNamespaceOverride" in _refusal(
        _compiled(_provider(not_delegating), *_tenant("shared", allowed))
    )
    assert "declares no spec.allowedSourceNamespaces" in _refusal(
        _compiled(_provider(delegating), *_tenant("shared"))
    )
    assert "'other' is not in spec.allowedSourceNamespaces.names" in _refusal(
        _compiled(_provider(delegating), *_tenant("other", allowed))
    )
    for spelling in ("allowWatchRuleSourceNamespaceOverride", "allowAnySourceNamespace"):
        spec = {"allowedNamespaces": {"names": ["team-a"]}, spelling: True}
        assert _namespaces(_compiled(_provider(spec), *_tenant("shared", allowed))) == ["shared"]


TRUSTED = {"tier": "trusted", "kubernetes.io/metadata.name": "team-a"}


def test_allowed_namespaces_admits_by_the_namespaces_labels() -> None:
    by_label = _provider({"allowedNamespaces": {"selector": {"matchLabels": {"tier": "trusted"}}}})
    assert _namespaces(_compiled(by_label, *_tenant(), labels={"team-a": TRUSTED})) == ["team-a"]
    other = _compiled(by_label, *_tenant(), labels={"team-a": {"tier": "sandbox"}})
    assert "its labels do not match spec.allowedNamespaces.selector (tier=trusted)" in _target_error(other)
    gone = _compiled(by_label, *_tenant(), labels={"team-b": TRUSTED})
    assert "no Namespace 'team-a' exists" in _target_error(gone)
    within = {"key": "tier", "operator": "In", "values": ["trusted", "gold"]}
    expressions = _provider({"accessFrom": {"selector": {"matchExpressions": [within]}}})
    assert _namespaces(_compiled(expressions, *_tenant(), labels={"team-a": TRUSTED})) == ["team-a"]
    untiered = {"key": "tier", "operator": "DoesNotExist"}
    absent = _provider({"allowedNamespaces": {"selector": {"matchExpressions": [untiered]}}})
    assert "do not match" in _target_error(_compiled(absent, *_tenant(), labels={"team-a": TRUSTED}))
    either = {"names": ["team-a"], "selector": {"matchLabels": {"x": "y"}}}
    names_or_labels = _provider({"allowedNamespaces": either})
    assert _namespaces(_compiled(names_or_labels, *_tenant(), labels={})) == ["team-a"], "names OR selector"


def test_an_invalid_selector_is_named_and_admits_nothing() -> None:
    near = {"key": "tier", "operator": "Near"}
    bad = _provider({"allowedNamespaces": {"selector": {"matchExpressions": [near]}}})
    compiled = _compiled(bad, *_tenant(), labels={"team-a": TRUSTED})
    report = compiled.reports[ObjectRef(Kind.CLUSTER_PROVIDER, "", "default")]
    assert [e.path for e in report.errors] == ["spec.allowedNamespaces.selector"]
    assert "selector is invalid" in _target_error(compiled)


def test_a_targets_source_policy_selects_by_label_too() -> None:
    delegating = {"allowedNamespaces": {"names": ["team-a"]}, "allowSourceNamespaceOverride": True}
    shared = {"selector": {"matchLabels": {"share": "yes"}}}
    labels = {"team-a": {}, "team-b": {"share": "yes"}, "team-c": {"share": "no"}}
    admitted = _compiled(_provider(delegating), *_tenant("team-b", shared), labels=labels)
    assert _namespaces(admitted) == ["team-b"]
    refused = _compiled(_provider(delegating), *_tenant("team-c", shared), labels=labels)
    assert "its labels do not match spec.allowedSourceNamespaces.selector (share=yes)" in _refusal(refused)
    unread = _compiled(_provider(delegating), *_tenant("team-b", shared))
    assert "could not be read" in _refusal(unread)


def test_a_declared_policy_is_exhaustive_even_for_the_rules_own_namespace() -> None:
    compiled = _compiled(*_tenant(allowed={"names": ["shared"]}))
    assert "add the rule's own namespace 'team-a'" in _refusal(compiled)
    listed = _compiled(*_tenant(allowed={"names": ["team-a"]}))
    assert _namespaces(listed) == ["team-a"]


def test_the_tenant_boundary_stays_whatever_a_provider_delegates() -> None:
    """Deny by default across tenants: never the controller's namespace nor every namespace."""
    delegating = {"allowedNamespaces": {"names": ["team-a"]}, "allowSourceNamespaceOverride": True}
    everything = {"names": ["*", HOME], "selector": {}}
    assert "never a tenant's source namespace" in _refusal(
        _compiled(_provider(delegating), *_tenant(HOME, everything))
    )
    assert "only a WatchRule in 'reverser'" in _refusal(
        _compiled(_provider(delegating), *_tenant("*", everything))
    )


def test_the_platforms_rules_keep_their_freedom_but_honour_a_declared_policy() -> None:
    compiled = _compiled(*_tenant("anywhere", namespace=HOME))
    assert _namespaces(compiled, "apps") == ["anywhere"]
    bound = _compiled(*_tenant("anywhere", {"names": ["elsewhere"]}, namespace=HOME))
    assert "'anywhere' is not in spec.allowedSourceNamespaces.names" in _refusal(bound)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"allowedNamespaces": "team-a"}, "spec.allowedNamespaces"),
        ({"allowedNamespaces": {"names": "team-a"}}, "spec.allowedNamespaces.names"),
        ({"allowSourceNamespaceOverride": "yes"}, "spec.allowSourceNamespaceOverride"),
    ],
)
def test_bad_fields_are_named(spec: dict[str, Any], field: str) -> None:
    report = _compiled(_provider(spec)).reports[ObjectRef(Kind.CLUSTER_PROVIDER, "", "default")]
    assert [e.path for e in report.errors] == [field]


NAMES = st.sampled_from(["team-a", "team-b", "shared", HOME, "*"])


@given(
    source=NAMES,
    admitted=st.lists(NAMES, max_size=3),
    delegates=st.booleans(),
    policy=st.none() | st.lists(NAMES, max_size=3),
)
def test_a_tenant_watches_another_namespace_only_when_every_party_agreed(
    source: str, admitted: list[str], delegates: bool, policy: list[str] | None
) -> None:
    """Model: the provider admits the target's namespace and delegates, the target's policy lists the
    source, and the source is neither the controller's namespace nor `*`; the own namespace is free
    unless a policy is declared."""
    provider = _provider(
        {"allowedNamespaces": {"names": admitted}, "allowSourceNamespaceOverride": delegates}
    )
    clusters = ClusterProviders([parse_object(provider)], HOME)
    target_doc = _tenant(allowed=None if policy is None else {"names": policy})[1]
    target = parse_object(target_doc)
    refusal = clusters.source_refusal("team-a", source, target)
    if source == "team-a":
        expected = policy is None or source in policy
    else:
        expected = (
            "team-a" in admitted
            and delegates
            and policy is not None
            and source in policy
            and source not in (HOME, "*")
        )
    assert (refusal is None) == expected


LABEL_SETS = st.sampled_from([{}, {"tier": "trusted"}, {"tier": "sandbox"}, {"tier": "trusted", "pci": "1"}])


@given(
    names=st.lists(NAMES, max_size=2),
    wanted=st.none() | st.sampled_from(["trusted", "sandbox"]),
    labels=st.none() | st.dictionaries(st.sampled_from(["team-a", "team-b"]), LABEL_SETS, max_size=2),
)
def test_allowed_namespaces_admits_exactly_by_names_or_matching_labels(
    names: list[str], wanted: str | None, labels: dict[str, dict[str, str]] | None
) -> None:
    """Model: admitted when listed, or when a selector is declared, the labels were read, the
    namespace exists and its `tier` label equals the selector's; otherwise refused."""
    policy: dict[str, Any] = {"names": names}
    if wanted is not None:
        policy["selector"] = {"matchLabels": {"tier": wanted}}
    clusters = ClusterProviders([parse_object(_provider({"allowedNamespaces": policy}))], HOME, labels)
    admitted = not clusters.target_problems("team-a", "default")
    expected = "team-a" in names or (
        wanted is not None
        and labels is not None
        and "team-a" in labels
        and labels["team-a"].get("tier") == wanted
    )
    assert admitted == expected
