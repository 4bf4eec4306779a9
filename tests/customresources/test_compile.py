"""Custom resources to the effective configuration: v0.41 objects, errors naming fields, round trip."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import (
    ConfigError,
    KnownHostsReference,
    SecretReference,
    Settings,
    SigningSettings,
    load_settings,
)
from pipeline.customresources.compile import compile_resources, go_duration_s
from pipeline.customresources.export import ExportError, export_resources
from pipeline.customresources.objects import CustomResourceError, Kind, ObjectRef, parse_object
from pipeline.customresources.selectors import selector_text
from pipeline.kube.client import ApiResource
from pipeline.kube.selector import parse_selector
from pipeline.router.component import destinations
from pipeline.watch.resolve import resolve_target

HOME = "reverser"
# The platform's grant the upstream objects (namespace team-a) need: their own repository folder.
GRANT = {
    "namespaces": ["team-*"],
    "url_prefixes": ["https://git.example.com/{namespace}/"],
    "path_prefixes": ["{namespace}"],
}
TENANTS = Settings(custom_resources={"tenants": [GRANT]})
VERBS = frozenset({"get", "list", "watch"})
DISCOVERY = {
    (api.group, api.resource): api
    for api in (
        ApiResource("", "v1", "configmaps", "ConfigMap", True, VERBS),
        ApiResource("", "v1", "secrets", "Secret", True, VERBS),
        ApiResource("", "v1", "namespaces", "Namespace", False, VERBS),
        ApiResource("apps", "v1", "deployments", "Deployment", True, VERBS),
        ApiResource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, VERBS),
    )
}
SAMPLE = """
clusters:
- {name: prod-eu-1, kubeconfig: /etc/reverser/prod.kubeconfig}
providers:
- name: platform-repo
  url: https://git.example.com/platform/live-state.git
  username_env: GIT_USERNAME
  password_env: GIT_PASSWORD
  committer: {name: Reverser Pipeline, email: reverser@example.com}
  commit_window_s: 2.5
  push_cooldown_s: 7
- name: archive
  url: https://git.example.com/platform/archive.git
  default_branch: trunk
targets:
- name: prod-apps
  provider: platform-repo
  branch: main
  path: clusters/prod-eu-1
  cluster: prod-eu-1
  prune: Always
  placement:
    by_type: {apps/v1/deployments: "{namespace}/apps/{name}.yaml"}
    default: "{groupPath}/{version}/{resource}/{namespace}/{name}.yaml"
  kustomize: {render: on, timeout_s: 20}
  rules:
  - resources: [configmaps, apps/deployments]
    namespaces: [shop, payments]
    label_selector: app=web,tier notin (db)
  - resources: [rbac.authorization.k8s.io/clusterroles]
    cluster_wide: true
  - resources: [namespaces]
- name: staging
  provider: platform-repo
  path: clusters/staging
  cluster: prod-eu-1
  commit_window_s: 0
  commit_message: {subject: "${operation} ${name}"}
  attribution: configured-author
  rules:
  - resources: [secrets]
    namespaces: [shop]
  encryption:
    age_recipients: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]
    sensitive_resources: [example.com/tokens]
- name: history
  provider: archive
  branch: release-1
  path: .
  cluster: prod-eu-1
  prune: Never
"""

# gitops-reverser v0.41 objects as an existing install has them, with a field this project does
# not act on (`syncPolicy`).
UPSTREAM = """
apiVersion: configbutler.ai/v1alpha3
kind: GitProvider
metadata: {name: repo, namespace: team-a, generation: 3}
spec:
  url: https://git.example.com/team-a/state.git
  secretRef: {name: git-creds}
  allowedBranches: [main, "feature/*"]
  push: {commitWindow: 1m30s}
  commit:
    committer: {name: GitOps Reverser, email: noreply@configbutler.ai}
    message: {eventTemplate: "[{{.Operation}}] {{.Name}}"}
---
apiVersion: configbutler.ai/v1alpha3
kind: GitTarget
metadata: {name: apps, namespace: team-a, generation: 1}
spec:
  providerRef: {group: configbutler.ai, kind: GitProvider, name: repo}
  branch: feature/x
  path: team-a/apps
  prune: {mode: always}
  placement:
    default: "{namespace}/{name}.yaml"
    byType: {v1/secrets: "{namespace}/secrets/{name}.yaml"}
  syncPolicy: {retry: 3}
---
apiVersion: configbutler.ai/v1alpha3
kind: WatchRule
metadata: {name: apps, namespace: team-a, generation: 2}
spec:
  targetRef: {name: apps}
  rules:
  - resources: [configmaps]
    operations: [CREATE, UPDATE]
    objectSelector: {matchLabels: {app: web}}
  - apiGroups: [apps]
    apiVersions: [v1]
    resources: [deployments]
  - resources: ["*"]
  - resources: [configmaps]
    sourceNamespace: kube-system
---
apiVersion: configbutler.ai/v1alpha3
kind: ClusterWatchRule
metadata: {name: team-a-rbac, generation: 1}
spec:
  targetRef: {name: apps, namespace: team-a}
  rules:
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterroles]
    scope: Cluster
"""


def _objects(text: str) -> list[Any]:
    return [parse_object(doc) for doc in yaml.safe_load_all(text) if doc]


def _streams(settings: Settings) -> set[tuple[str, str, str, str, str]]:
    """(target, group, resource, scope, canonical selector) of every stream the rules resolve to."""
    cluster = settings.clusters[0]
    found = set()
    for target in settings.targets:
        specs, _ = resolve_target(target, cluster, DISCOVERY)
        for s in specs:
            selector = repr(sorted(map(str, parse_selector(s.label_selector).match_expressions())))
            found.add((s.stream.target, s.stream.group, s.stream.resource, s.stream.scope, selector))
    return found


def _sample(tmp_path: Path) -> Settings:
    path = tmp_path / "config.yaml"
    path.write_text(SAMPLE)
    return load_settings(path, environ={})


def test_yaml_to_resources_and_back_gives_the_same_configuration_and_routing(tmp_path: Path) -> None:
    original = _sample(tmp_path)
    documents = export_resources(original, HOME)
    # through YAML text, as `reverser config export | kubectl apply -f -` would carry them
    reparsed = list(yaml.safe_load_all(yaml.safe_dump_all(documents)))
    compiled = compile_resources([parse_object(d) for d in reparsed], home_namespace=HOME, base=original)
    assert compiled.errors == []
    assert len(compiled.reports) == len(reparsed), "one report for every exported object"
    assert all(not r.unsupported for r in compiled.reports.values())
    again = compiled.settings(original)

    def by_name(items: list[Any]) -> list[Any]:
        return sorted(items, key=lambda item: item.name)

    assert by_name(again.providers) == by_name(original.providers)
    assert destinations(again) == destinations(original)
    assert _streams(again) == _streams(original)
    assert len(_streams(original)) == 7
    for before, after in zip(by_name(original.targets), by_name(again.targets), strict=True):
        assert after.model_dump(exclude={"rules", "branch"}) == before.model_dump(exclude={"rules", "branch"})


def test_upstream_objects_compile_and_report_the_fields_they_do_not_support() -> None:
    compiled = compile_resources(_objects(UPSTREAM), home_namespace=HOME, base=TENANTS)
    assert compiled.errors == []
    (provider,) = compiled.providers
    assert provider.name == "team-a/repo"
    assert provider.commit_window_s == 90.0
    assert provider.default_branch == "main"
    assert provider.committer.name == "GitOps Reverser"
    (target,) = compiled.targets
    assert (target.name, target.provider, target.branch, target.prune, target.cluster) == (
        "team-a/apps",
        "team-a/repo",
        "feature/x",
        "Always",
        "default",
    )
    assert target.rules[0].operations == ["CREATE", "UPDATE"]
    assert [(r.resources, r.namespaces, r.label_selector, r.cluster_wide) for r in target.rules] == [
        (["configmaps"], ["team-a"], "app=web", False),
        (["apps/deployments"], ["team-a"], "", False),
        (["*"], ["team-a"], "", False),
        (["rbac.authorization.k8s.io/clusterroles"], [], "", False),
    ]
    rule = ObjectRef(Kind.WATCH_RULE, "team-a", "apps")
    assert [(o.ref, o.item) for o in compiled.origins["team-a/apps"]] == [
        (rule, 0),
        (rule, 1),
        (rule, 2),
        (ObjectRef(Kind.CLUSTER_WATCH_RULE, "", "team-a-rbac"), 0),
    ]
    unsupported = {ref.kind: r.unsupported for ref, r in compiled.reports.items()}
    assert unsupported[Kind.GIT_PROVIDER] == []
    # the provider's Go template is its targets' (docs/custom-resources.md, Commit messages)
    assert target.commit_message is not None
    assert target.commit_message.event_template == "[{{.Operation}}] {{.Name}}"
    assert provider.credentials_secret is not None
    assert provider.credentials_secret.describe() == "team-a/git-creds"
    assert provider.known_hosts_ref is None
    assert unsupported[Kind.GIT_TARGET] == ["spec.syncPolicy.retry"]
    # spec.placement is acted on: new objects' files go where its templates say
    assert target.placement is not None
    assert target.placement.default == "{namespace}/{name}.yaml"
    assert set(target.placement_policy.by_type) == {"v1/secrets"}
    assert unsupported[Kind.WATCH_RULE] == []
    # a rule's apiVersions is the version its streams watch (docs/custom-resources.md)
    assert [r.versions for r in target.rules] == [[], ["v1"], [], []]
    assert unsupported[Kind.CLUSTER_WATCH_RULE] == []
    assert [(p.item, p.reason) for p in compiled.item_problems] == [(3, "SourceNamespaceForbidden")]


def _edited(path: str, value: Any) -> list[Any]:
    """The upstream objects with one field of one object replaced (`Kind.dotted.path`)."""
    documents = [doc for doc in yaml.safe_load_all(UPSTREAM) if doc]
    kind, _, dotted = path.partition(".")
    document = next(d for d in documents if d["kind"] == kind)
    *parents, last = dotted.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return [parse_object(copy.deepcopy(d)) for d in documents]


@pytest.mark.parametrize(
    ("path", "value", "failing", "field", "words"),
    [
        ("GitTarget.spec.branch", "release", Kind.GIT_TARGET, "spec.branch", "not in spec.allowedBranches"),
        ("GitTarget.spec.branch", "feature/x/y", Kind.GIT_TARGET, "spec.branch", "allowedBranches"),
        ("GitTarget.spec.path", "../escape", Kind.GIT_TARGET, "spec.path", ".."),
        ("GitProvider.spec.url", "ext::sh -c x", Kind.GIT_PROVIDER, "spec.url", "remote-helper"),
        (
            "GitProvider.spec.push",
            {"commitWindow": "5 seconds"},
            Kind.GIT_PROVIDER,
            "spec.push.commitWindow",
            "Go duration",
        ),
        (
            "GitProvider.spec.pipeline",
            {"push_cooldown_s": -1},
            Kind.GIT_PROVIDER,
            "spec.pipeline.push_cooldown_s",
            "between 0 and 3600",
        ),
        (
            "GitProvider.spec.pipeline",
            {"nonsense": 1},
            Kind.GIT_PROVIDER,
            "spec.pipeline.nonsense",
            "may be set only in the controller's namespace 'reverser'",
        ),
        ("GitProvider.spec.pipeline", {"url": "x"}, Kind.GIT_PROVIDER, "spec.pipeline.url", "spec.url"),
        (
            "GitProvider.spec.pipeline",
            {"password_env": "GIT_PASSWORD"},
            Kind.GIT_PROVIDER,
            "spec.pipeline.password_env",
            "may be set only in the controller's namespace",
        ),
        (
            "GitProvider.spec.pipeline",
            {"ssh": {"private_key_env": "KEY", "allow_unknown_host_keys": True}},
            Kind.GIT_PROVIDER,
            "spec.pipeline.ssh",
            "may be set only in the controller's namespace",
        ),
        (
            "GitProvider.spec.pipeline",
            {"credentials_secret": {"namespace": "team-a", "name": "x"}},
            Kind.GIT_PROVIDER,
            "spec.pipeline.credentials_secret",
            "set by spec.secretRef",
        ),
        (
            "GitProvider.spec.knownHostsRef",
            {"kind": "Pod", "name": "hosts"},
            Kind.GIT_PROVIDER,
            "spec.knownHostsRef.kind",
            "ConfigMap",
        ),
        # a misspelt field this project reads is named as such (customresources/typos.py)
        (
            "GitProvider.spec.secretRef",
            {"nme": "x"},
            Kind.GIT_PROVIDER,
            "spec.secretRef.nme",
            "did you mean spec.secretRef.name?",
        ),
        (
            "GitTarget.spec.providerRef",
            {"name": "missing"},
            Kind.GIT_TARGET,
            "spec.providerRef.name",
            "team-a/missing",
        ),
        ("GitTarget.spec.prune", {"mode": "sometimes"}, Kind.GIT_TARGET, "spec.prune.mode", "Never"),
        (
            "GitTarget.spec.placement",
            {"default": "../{name}.yaml"},
            Kind.GIT_TARGET,
            "spec.placement",
            "leaves the target folder",
        ),
        (
            "GitTarget.spec.placement",
            {"byType": {"v1/configmaps": "{nmespace}/{name}.yaml"}},
            Kind.GIT_TARGET,
            "spec.placement",
            "unknown variable {nmespace}",
        ),
        ("GitTarget.spec.placement", {"byType": ["x"]}, Kind.GIT_TARGET, "spec.placement.byType", "mapping"),
        (
            "WatchRule.spec.rules.0.objectSelector",
            {"matchLabels": {"app": "a b"}},
            Kind.WATCH_RULE,
            "spec.rules[0].objectSelector",
            "found 'b'",
        ),
        (
            "WatchRule.spec.rules.1.resources",
            ["Deploy ments"],
            Kind.WATCH_RULE,
            "spec.rules[1].resources",
            "pattern",
        ),
        ("WatchRule.spec.targetRef", {"name": "nope"}, Kind.WATCH_RULE, "spec.targetRef.name", "team-a/nope"),
        (
            "WatchRule.spec.sourceNamespace",
            "x",
            Kind.WATCH_RULE,
            "spec.sourceNamespace",
            "rules[].sourceNamespace",
        ),
        (
            "ClusterWatchRule.spec.targetRef",
            {"name": "apps"},
            Kind.CLUSTER_WATCH_RULE,
            "spec.targetRef.namespace",
            "required",
        ),
    ],
)
def test_an_invalid_object_is_left_out_with_an_error_naming_its_field(
    path: str, value: Any, failing: Kind, field: str, words: str
) -> None:
    compiled = compile_resources(_edited(path, value), home_namespace=HOME, base=TENANTS)
    errors = [e for ref, e in compiled.errors if ref.kind is failing]
    assert errors, "the edit must be refused"
    error = errors[0]
    assert error.path.startswith(field), error
    assert words in error.message, error
    valid = {ref.kind for ref, r in compiled.reports.items() if r.accepted}
    assert failing not in valid


def test_a_target_without_its_provider_takes_its_rules_down_with_a_reason() -> None:
    compiled = compile_resources(
        _edited("GitTarget.spec.providerRef", {"name": "gone"}), home_namespace=HOME, base=TENANTS
    )
    assert compiled.targets == []
    rules = [e.message for ref, e in compiled.errors if ref.kind is Kind.WATCH_RULE]
    assert rules == ["no valid GitTarget team-a/apps"]


def test_overlapping_targets_refuse_the_second_and_keep_the_first() -> None:
    documents = [doc for doc in yaml.safe_load_all(UPSTREAM) if doc]
    twin = copy.deepcopy(next(d for d in documents if d["kind"] == "GitTarget"))
    twin["metadata"]["name"] = "zz-twin"
    twin["spec"]["path"] = "team-a/apps/nested"
    compiled = compile_resources(
        [parse_object(d) for d in [*documents, twin]], home_namespace=HOME, base=TENANTS
    )
    assert [t.name for t in compiled.targets] == ["team-a/apps"]
    ((ref, error),) = compiled.errors
    assert ref.name == "zz-twin"
    assert error.path == "spec.path"
    assert "overlaps folder team-a/apps of target team-a/apps (GitTarget team-a/apps)" in error.message


def test_a_cluster_watch_rule_of_a_namespaced_resource_gets_no_stream() -> None:
    documents = [doc for doc in yaml.safe_load_all(UPSTREAM) if doc]
    rule = next(d for d in documents if d["kind"] == "ClusterWatchRule")
    rule["spec"]["rules"] = [{"resources": ["configmaps"]}]
    compiled = compile_resources([parse_object(d) for d in documents], home_namespace=HOME, base=TENANTS)
    settings = compiled.settings(Settings(clusters=[{"name": "default"}]))
    _, problems = resolve_target(settings.targets[0], settings.clusters[0], DISCOVERY)
    # rule 2 is the WatchRule's `*` (its ConfigMaps stream conflicts with rule 0's selector),
    # rule 3 the ClusterWatchRule's item
    assert [(p.rule, p.reason) for p in problems] == [(2, "SelectorConflict"), (3, "ScopeMismatch")]


def test_home_namespace_rules_may_watch_other_namespaces_and_every_namespace() -> None:
    text = UPSTREAM.replace("team-a", HOME)
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    rule = next(d for d in documents if d["kind"] == "WatchRule")
    rule["spec"]["rules"] = [
        {"resources": ["configmaps"], "sourceNamespace": "kube-system"},
        {"resources": ["secrets"], "sourceNamespace": "*"},
    ]
    compiled = compile_resources([parse_object(d) for d in documents], home_namespace=HOME)
    assert compiled.item_problems == []
    rules = compiled.targets[0].rules
    assert [(r.namespaces, r.cluster_wide) for r in rules[:2]] == [(["kube-system"], False), ([], True)]
    assert compiled.targets[0].name == "apps"


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"apiVersion": "configbutler.ai/v1alpha2", "kind": "GitTarget"}, "apiVersion"),
        ({"apiVersion": "configbutler.ai/v1alpha3", "kind": "GitRepoConfig"}, "kind"),
        ({"apiVersion": "configbutler.ai/v1alpha3", "kind": "GitTarget", "metadata": {}}, "metadata.name"),
        (
            {
                "apiVersion": "configbutler.ai/v1alpha3",
                "kind": "GitTarget",
                "metadata": {"name": "a"},
                "spec": {},
            },
            "metadata.namespace",
        ),
        (
            {
                "apiVersion": "configbutler.ai/v1alpha3",
                "kind": "GitTarget",
                "metadata": {"name": "a", "namespace": "b"},
            },
            "spec",
        ),
    ],
)
def test_unreadable_objects_say_which_field(document: dict[str, Any], words: str) -> None:
    with pytest.raises(CustomResourceError, match=words):
        parse_object(document)


def test_file_mode_and_resource_mode_cannot_be_mixed(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SAMPLE + "custom_resources: {enabled: true}\n")
    with pytest.raises(ConfigError, match="remove providers and targets from the file"):
        load_settings(path, environ={})
    path.write_text("custom_resources: {enabled: true}\n")
    with pytest.raises(ConfigError, match="needs a cluster"):
        load_settings(path, environ={})
    path.write_text("clusters: [{name: a}]\ncustom_resources: {enabled: true, cluster: b}\n")
    with pytest.raises(ConfigError, match="unknown cluster 'b'"):
        load_settings(path, environ={})
    path.write_text("clusters: [{name: a}, {name: b}]\ncustom_resources: {enabled: true, cluster: b}\n")
    assert load_settings(path, environ={}).resources_cluster.name == "b"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("1m30s", 90.0), ("750ms", 0.75), ("0s", 0.0), ("0", 0.0), ("1h", 3600.0), ("-2s", -2.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "5 s", "s", "1m30", "1d"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="Go duration"):
        go_duration_s(text)


def test_object_selectors_become_selector_text() -> None:
    selector = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "t", "operator": "In", "values": ["y", "x"]},
            {"key": "u", "operator": "NotIn", "values": ["z"]},
            {"key": "v", "operator": "Exists"},
            {"key": "w", "operator": "DoesNotExist"},
        ],
    }
    assert selector_text(selector) == "a=1,b=2,t in (x,y),u notin (z),v,!w"
    assert selector_text(None) == ""
    with pytest.raises(ValueError, match="Gt"):
        selector_text({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})


def test_export_refuses_what_custom_resources_cannot_name(tmp_path: Path) -> None:
    settings = _sample(tmp_path)
    bad = settings.model_copy(
        update={"targets": [settings.targets[0].model_copy(update={"name": "Prod_Apps"})]}
    )
    with pytest.raises(ExportError, match="'Prod_Apps'"):
        export_resources(bad, HOME)
    rule = settings.targets[0].rules[0].model_copy(update={"label_selector": "size>3"})
    numeric = settings.model_copy(
        update={"targets": [settings.targets[0].model_copy(update={"rules": [rule]})]}
    )
    with pytest.raises(ExportError, match="size>3"):
        export_resources(numeric, HOME)


def test_credential_references_export_as_secret_ref_and_compile_back(tmp_path: Path) -> None:
    settings = _sample(tmp_path)
    archive = settings.provider("archive").model_copy(
        update={
            "url": "ssh://git@git.example.com/platform/archive.git",
            "credentials_secret": SecretReference(namespace=HOME, name="archive-git"),
            "known_hosts_ref": KnownHostsReference(kind="Secret", namespace=HOME, name="git-hosts"),
        }
    )
    providers = [archive if p.name == "archive" else p for p in settings.providers]
    with_secret = settings.model_copy(update={"providers": providers})
    documents = export_resources(with_secret, HOME)
    (exported,) = [d for d in documents if d["metadata"]["name"] == "archive"]
    assert exported["spec"]["secretRef"] == {"name": "archive-git"}
    assert exported["spec"]["knownHostsRef"] == {"kind": "Secret", "name": "git-hosts"}
    assert "credentials_secret" not in exported["spec"].get("pipeline", {})
    compiled = compile_resources(
        [parse_object(d) for d in yaml.safe_load_all(yaml.safe_dump_all(documents))],
        home_namespace=HOME,
        base=with_secret,
    )
    assert compiled.errors == []
    assert sorted(compiled.providers, key=lambda p: p.name) == sorted(providers, key=lambda p: p.name)
    # a GitProvider can name only a Secret of its own namespace
    with pytest.raises(ExportError, match="'archive': credentials_secret is in namespace 'reverser'"):
        export_resources(with_secret, "elsewhere")


def test_wildcard_items_become_patterns_and_export_writes_them_back() -> None:
    documents = [doc for doc in yaml.safe_load_all(UPSTREAM) if doc]
    rule = next(d for d in documents if d["kind"] == "WatchRule")
    rule["spec"]["rules"] = [
        {"apiGroups": [""], "resources": ["*"]},
        {"apiGroups": ["*"], "resources": ["configmaps"]},
        {"apiGroups": ["apps"], "resources": ["*"]},
        {"resources": ["*"], "sourceNamespace": "*"},
    ]
    compiled = compile_resources([parse_object(d) for d in documents], home_namespace="team-a")
    assert compiled.item_problems == []
    (target,) = compiled.targets
    assert [(r.resources, r.namespaces, r.cluster_wide) for r in target.rules[:4]] == [
        (["/*"], ["team-a"], False),
        (["*/configmaps"], ["team-a"], False),
        (["apps/*"], ["team-a"], False),
        (["*"], [], True),
    ]
    base = Settings(clusters=[{"name": "default"}])
    settings = compiled.settings(base)
    streams = _streams(settings)
    assert ("apps", "deployments", "team-a") in {(g, r, s) for _, g, r, s, _ in streams}
    # exported and read back: the same streams
    exported = export_resources(settings, "team-a")
    again = compile_resources([parse_object(d) for d in exported], home_namespace="team-a", base=base)
    assert again.errors == []
    assert _streams(again.settings(base)) == streams


def test_a_signing_secret_ref_compiles_to_ssh_signing_with_that_secret_and_exports_back() -> None:
    documents = [doc for doc in yaml.safe_load_all(UPSTREAM) if doc]
    provider_doc = next(d for d in documents if d["kind"] == "GitProvider")
    namespace = provider_doc["metadata"]["namespace"]
    provider_doc["spec"]["commit"] = {
        "signing": {"secretRef": {"name": "signer"}, "generateWhenMissing": True}
    }
    compiled = compile_resources([parse_object(d) for d in documents], home_namespace=namespace)
    assert compiled.errors == []
    (provider,) = compiled.providers
    assert provider.signing == SigningSettings(
        format="ssh", key_secret=SecretReference(namespace=namespace, name="signer")
    )
    assert provider.signing_secret is not None
    assert provider.reads_cluster
    (report,) = [r for r in compiled.reports.values() if r.ref.kind is Kind.GIT_PROVIDER]
    assert report.unsupported == []  # generateWhenMissing: the controller makes the key
    # exported and read back: the same provider, the reference as spec.commit.signing.secretRef
    settings = compiled.settings(Settings(clusters=[{"name": "default"}]))
    exported = export_resources(settings, namespace)
    (again_doc,) = [d for d in exported if d["kind"] == "GitProvider"]
    assert again_doc["spec"]["commit"]["signing"] == {"secretRef": {"name": "signer"}}
    assert "signing" not in again_doc["spec"].get("pipeline", {})
    again = compile_resources([parse_object(d) for d in exported], home_namespace=namespace)
    assert again.providers == compiled.providers

    # no name, or spec.pipeline.signing as well: an error naming the field
    provider_doc["spec"]["commit"] = {"signing": {"secretRef": {}}}
    refused = compile_resources([parse_object(d) for d in documents], home_namespace=namespace)
    assert [e.path for ref, e in refused.errors if ref.kind is Kind.GIT_PROVIDER] == [
        "spec.commit.signing.secretRef.name"
    ]
    provider_doc["spec"]["commit"] = {"signing": {"secretRef": {"name": "signer"}}}
    provider_doc["spec"]["pipeline"] = {"signing": {"format": "ssh", "key_env": "SIGNING_KEY"}}
    both = compile_resources([parse_object(d) for d in documents], home_namespace=namespace)
    assert [e.path for ref, e in both.errors if ref.kind is Kind.GIT_PROVIDER] == ["spec.pipeline.signing"]


def _with_messages(provider: dict[str, Any] | None, target: dict[str, Any] | None) -> list[Any]:
    documents = [doc for doc in yaml.safe_load_all(UPSTREAM) if doc]
    for doc in documents:
        if doc["kind"] == "GitProvider":
            doc["spec"]["commit"] = {"message": provider} if provider is not None else {}
        if doc["kind"] == "GitTarget" and target is not None:
            doc["spec"]["commit"] = {"message": target}
    return [parse_object(d) for d in documents]


def test_grs_message_templates_reach_every_target_and_a_targets_own_win() -> None:
    provider = {
        "eventTemplate": "[{{.Operation}}] {{.Name}}",
        "groupTemplate": "{{.Author}}: {{.Count}}",
        "reconcileTemplate": "reconciled {{.Count}}",
    }
    compiled = compile_resources(
        _with_messages(provider, {"groupTemplate": "{{len .Resources}} objects"}), home_namespace="team-a"
    )
    assert compiled.errors == []
    (target,) = compiled.targets
    assert target.commit_message is not None
    assert (
        target.commit_message.event_template,
        target.commit_message.group_template,
        target.commit_message.reconcile_template,
    ) == ("[{{.Operation}}] {{.Name}}", "{{len .Resources}} objects", "reconciled {{.Count}}")
    assert [p for r in compiled.reports.values() for p in r.unsupported if p.startswith("spec.commit")] == []


def test_a_template_the_worker_cannot_render_is_an_error_naming_the_field_and_the_construct() -> None:
    cases = {
        "eventTemplate": ('{{define "x"}}{{end}}', "{{define}} is not supported"),
        "groupTemplate": (
            "{{.Username}}",
            "can't evaluate field Username in type git.GroupedCommitMessageData",
        ),
        "reconcileTemplate": ("{{html .Revision}}", "function 'html' is not supported"),
    }
    for field_name, (text, why) in cases.items():
        compiled = compile_resources(_with_messages({field_name: text}, None), home_namespace="team-a")
        (problem,) = [e for ref, e in compiled.errors if ref.kind is Kind.GIT_PROVIDER]
        assert problem.path == f"spec.commit.message.{field_name}"
        assert why in problem.message
        assert compiled.providers == []
    compiled = compile_resources(_with_messages(None, {"eventTemplate": "{{.Nope"}), home_namespace="team-a")
    (problem,) = [e for ref, e in compiled.errors if ref.kind is Kind.GIT_TARGET]
    assert problem.path == "spec.commit.message.eventTemplate"


def test_go_templates_and_this_projects_subject_are_one_or_the_other() -> None:
    objects = _with_messages({"eventTemplate": "{{.Name}}"}, None)
    for resource in objects:
        if resource.ref.kind is Kind.GIT_TARGET:
            resource.spec["pipeline"] = {"commit_message": {"subject": "${name}"}}
    compiled = compile_resources(objects, home_namespace="team-a")
    (problem,) = [e for ref, e in compiled.errors if ref.kind is Kind.GIT_TARGET]
    assert problem.path.startswith("spec.pipeline.commit_message")
    assert "keep one" in problem.message
