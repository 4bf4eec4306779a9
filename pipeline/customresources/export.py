"""The custom resources for an existing YAML file (`reverser config export`).

Everything lands in one namespace, the controller's home namespace, where objects keep their
names; compiled back (`compile_resources`) they give the same providers, the same destinations
and the same watch streams as the file. A rule with namespaces becomes WatchRule items with an
explicit `sourceNamespace`, a `cluster_wide` rule items with `sourceNamespace: "*"`, and a rule
with neither (cluster-scoped resources) ClusterWatchRule items.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.config import ProviderSettings, Settings, TargetSettings, WatchRule
from pipeline.customresources.objects import API_VERSION, Kind
from pipeline.kube.selector import SelectorError, parse_selector

__all__ = ["ExportError", "export_resources"]

_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ExportError(ValueError):
    """A setting has no custom resource spelling (the message names the provider or target)."""


def _duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds}s"


def _object_name(what: str, name: str) -> str:
    if not _OBJECT_NAME.match(name):
        raise ExportError(f"{what} {name!r}: not a valid Kubernetes object name (lower-case DNS name)")
    return name


def _metadata(name: str, namespace: str | None) -> dict[str, Any]:
    return {"name": name} if namespace is None else {"name": name, "namespace": namespace}


def _provider(provider: ProviderSettings, branches: list[str], namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "url": provider.url,
        "allowedBranches": [provider.default_branch, *sorted(set(branches) - {provider.default_branch})],
        "push": {"commitWindow": _duration(provider.commit_window_s)},
        "commit": {"committer": provider.committer.model_dump()},
    }
    extension = provider.model_dump(
        mode="json",
        exclude_defaults=True,
        exclude={
            "name",
            "url",
            "default_branch",
            "committer",
            "commit_window_s",
            "credentials_secret",
            "known_hosts_ref",
            *(["signing"] if provider.signing_secret is not None else []),
        },
    )
    if extension:
        spec["pipeline"] = extension
    secret, hosts, signing = provider.credentials_secret, provider.known_hosts_ref, provider.signing_secret
    for where, ref in (
        ("credentials_secret", secret),
        ("known_hosts_ref", hosts),
        ("signing.key_secret", signing),
    ):
        if ref is not None and ref.namespace != namespace:
            # a GitProvider can only name objects of its own namespace
            raise ExportError(
                f"provider {provider.name!r}: {where} is in namespace {ref.namespace!r}, but the "
                f"resources are exported to {namespace!r}; a GitProvider names only objects of its "
                "own namespace (export with --namespace " + ref.namespace + ")"
            )
    if secret is not None:
        spec["secretRef"] = {"name": secret.name}
    if hosts is not None:
        spec["knownHostsRef"] = {"kind": hosts.kind, "name": hosts.name}
    if signing is not None:
        spec["commit"]["signing"] = {"secretRef": {"name": signing.name}}
    return {
        "apiVersion": API_VERSION,
        "kind": Kind.GIT_PROVIDER.value,
        "metadata": _metadata(_object_name("provider", provider.name), namespace),
        "spec": spec,
    }


def _target(target: TargetSettings, default_branch: str, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "providerRef": {"name": target.provider},
        "branch": target.branch or default_branch,
        "path": target.path,
        "clusterProviderRef": {"name": target.cluster},
        "prune": {"mode": target.prune.value},
    }
    extension = target.model_dump(
        mode="json",
        exclude_defaults=True,
        exclude={"name", "provider", "branch", "path", "cluster", "prune", "rules", "encryption"}
        | {"placement"},
    )
    if target.placement is not None:
        placement: dict[str, Any] = {}
        if target.placement.by_type:
            placement["byType"] = dict(target.placement.by_type)
        if target.placement.default is not None:
            placement["default"] = target.placement.default
        spec["placement"] = placement
    if target.encryption is not None:
        key_secret = target.encryption.age_key_secret
        recipients: dict[str, Any] = {}
        if target.encryption.age_recipients:
            recipients["publicKeys"] = list(target.encryption.age_recipients)
        if key_secret is not None:
            if key_secret.namespace != namespace:
                raise ExportError(
                    f"target {target.name!r}: encryption.age_key_secret is in namespace "
                    f"{key_secret.namespace!r}, but the resources are exported to {namespace!r}; a "
                    "GitTarget names only a Secret of its own namespace (export with --namespace "
                    + key_secret.namespace
                    + ")"
                )
            recipients["extractFromSecret"] = True
            if target.encryption.generate_age_key:
                recipients["generateWhenMissing"] = True
        if recipients:
            spec["encryption"] = {"provider": "sops", "age": {"enabled": True, "recipients": recipients}}
            if key_secret is not None:
                spec["encryption"]["secretRef"] = {"name": key_secret.name}
        rest = target.encryption.model_dump(
            mode="json",
            exclude_defaults=True,
            exclude={"age_recipients", "age_key_secret", "generate_age_key"},
        )
        if rest or not recipients:
            extension["encryption"] = rest
    if extension:
        spec["pipeline"] = extension
    return {
        "apiVersion": API_VERSION,
        "kind": Kind.GIT_TARGET.value,
        "metadata": _metadata(_object_name("target", target.name), namespace),
        "spec": spec,
    }


def _object_selector(target: str, text: str) -> dict[str, Any]:
    """`a=b` requirements as matchLabels, the rest as matchExpressions."""
    try:
        expressions = parse_selector(text).match_expressions()
    except SelectorError as exc:
        raise ExportError(f"target {target}: label_selector {text!r}: {exc}") from None
    labels: dict[str, Any] = {}
    rest: list[dict[str, object]] = []
    for expression in expressions:
        values = expression.get("values")
        key = str(expression["key"])
        if (
            expression["operator"] == "In"
            and isinstance(values, list)
            and len(values) == 1
            and key not in labels
        ):
            labels[key] = values[0]
        else:
            rest.append(expression)
    selector: dict[str, Any] = {}
    if labels:
        selector["matchLabels"] = labels
    if rest:
        selector["matchExpressions"] = rest
    return selector


def _items(target: str, rule: WatchRule, source: str | None) -> list[dict[str, Any]]:
    """One item per API group of the rule's resources (bare names keep no apiGroups)."""
    by_group: dict[str | None, list[str]] = {}
    for text in rule.resources:
        prefix, _, resource = text.rpartition("/")
        by_group.setdefault(prefix if "/" in text else None, []).append(resource)
    items: list[dict[str, Any]] = []
    for group, resources in by_group.items():
        item: dict[str, Any] = {"resources": resources}
        if group is not None:
            item["apiGroups"] = [group]
        if source is not None:
            item["sourceNamespace"] = source
        if rule.label_selector:
            item["objectSelector"] = _object_selector(target, rule.label_selector)
        if rule.operations:
            item["operations"] = [operation.value for operation in rule.operations]
        if rule.versions:
            item["apiVersions"] = list(rule.versions)
        items.append(item)
    return items


def _rules(target: TargetSettings, namespace: str) -> list[dict[str, Any]]:
    namespaced: list[dict[str, Any]] = []
    cluster: list[dict[str, Any]] = []
    for rule in target.rules:
        if rule.cluster_wide:
            namespaced.extend(_items(target.name, rule, "*"))
        elif rule.namespaces:
            for source in rule.namespaces:
                namespaced.extend(_items(target.name, rule, source))
        else:
            cluster.extend(_items(target.name, rule, None))
    out: list[dict[str, Any]] = []
    if namespaced:
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": Kind.WATCH_RULE.value,
                "metadata": _metadata(target.name, namespace),
                "spec": {"targetRef": {"name": target.name}, "rules": namespaced},
            }
        )
    if cluster:
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": Kind.CLUSTER_WATCH_RULE.value,
                "metadata": _metadata(f"{namespace}.{target.name}", None),
                "spec": {"targetRef": {"name": target.name, "namespace": namespace}, "rules": cluster},
            }
        )
    return out


def export_resources(settings: Settings, namespace: str) -> list[dict[str, Any]]:
    """GitProviders, GitTargets, WatchRules and ClusterWatchRules for the file's providers and targets."""
    out: list[dict[str, Any]] = []
    for provider in settings.providers:
        branches = [t.branch for t in settings.targets if t.provider == provider.name and t.branch]
        out.append(_provider(provider, branches, namespace))
    for target in settings.targets:
        out.append(_target(target, settings.provider(target.provider).default_branch, namespace))
        out.extend(_rules(target, namespace))
    return out
