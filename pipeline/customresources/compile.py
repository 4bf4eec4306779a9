"""Custom resources to the YAML file's providers, targets and rules, with a report per object.

A pure function of the objects (no I/O), so the offline `reverser config check`, the controller
and the tests share it. Every object is validated by the same pydantic models as the YAML file;
an error names the custom resource's field (`spec.rules[1].objectSelector`), never the YAML one.
An invalid object is left out and reported; it never takes valid objects down with it. Fields
this project does not act on are accepted and listed as unsupported (docs/custom-resources.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from pipeline.attribution.selector import SelectorError, parse_selector
from pipeline.config import (
    CustomResourceSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.customresources.objects import CustomResource, Kind, ObjectRef, effective_name
from pipeline.targetrules import ALL_OPERATIONS, WILDCARD

__all__ = [
    "CompiledConfig",
    "FieldProblem",
    "ItemProblem",
    "ObjectReport",
    "RuleOrigin",
    "compile_resources",
    "go_duration_s",
    "selector_text",
]

# Leaf paths (`[]` stands for any list index) each kind acts on; any other field that is set is
# accepted and reported as unsupported. `pipeline` holds this project's own settings.
_SUPPORTED: Mapping[Kind, tuple[str, ...]] = {
    Kind.GIT_PROVIDER: (
        "spec.url",
        "spec.allowedBranches",
        "spec.push.commitWindow",
        "spec.commit.committer.name",
        "spec.commit.committer.email",
        "spec.secretRef.name",
        "spec.knownHostsRef.kind",
        "spec.knownHostsRef.name",
        "spec.commit.signing.secretRef.name",
        "spec.pipeline",
    ),
    Kind.GIT_TARGET: (
        "spec.providerRef",
        "spec.gitProviderRef",
        "spec.branch",
        "spec.path",
        "spec.clusterProviderRef",
        "spec.prune.mode",
        "spec.encryption.provider",
        "spec.encryption.age.enabled",
        "spec.encryption.age.recipients.publicKeys",
        "spec.pipeline",
    ),
    Kind.WATCH_RULE: (
        "spec.targetRef",
        "spec.rules[].resources",
        "spec.rules[].apiGroups",
        "spec.rules[].sourceNamespace",
        "spec.rules[].objectSelector",
        "spec.rules[].operations",
    ),
    Kind.CLUSTER_WATCH_RULE: (
        "spec.targetRef",
        "spec.rules[].resources",
        "spec.rules[].apiGroups",
        "spec.rules[].objectSelector",
        "spec.rules[].operations",
        "spec.rules[].scope",
    ),
}
_PRUNE_MODES = {"never": "Never", "onevent": "OnEvent", "always": "Always"}
_GLOB = re.compile(r"[*?\[]")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNIT_S = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """An error in one field of one object (`path` is the custom resource's field)."""

    path: str
    message: str

    def describe(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(slots=True)
class ObjectReport:
    """What became of one object: its errors (it was left out) and its unsupported fields."""

    ref: ObjectRef
    generation: int
    errors: list[FieldProblem] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return not self.errors


@dataclass(frozen=True, slots=True)
class RuleOrigin:
    """The object and `spec.rules[item]` one rule of a target came from."""

    ref: ObjectRef
    item: int


@dataclass(frozen=True, slots=True)
class ItemProblem:
    """A rule item that became no rule at all (a wildcard, a forbidden source namespace, ...)."""

    ref: ObjectRef
    item: int
    resource: str
    reason: str
    message: str


@dataclass(slots=True)
class CompiledConfig:
    """The effective providers and targets, and where every rule of every target came from."""

    providers: list[ProviderSettings]
    targets: list[TargetSettings]
    reports: dict[ObjectRef, ObjectReport]
    origins: dict[str, list[RuleOrigin]]
    item_problems: list[ItemProblem]

    def settings(self, base: Settings) -> Settings:
        """`base` (the static file: log, clusters, audit, ...) with these providers and targets."""
        return base.model_copy(update={"providers": self.providers, "targets": self.targets})

    @property
    def errors(self) -> list[tuple[ObjectRef, FieldProblem]]:
        return [(ref, e) for ref, report in sorted(self.reports.items()) for e in report.errors]


def go_duration_s(text: str) -> float:
    """A Go duration string ("5s", "1m30s", "750ms") in seconds; raises ValueError."""
    spelled = text.strip()
    if spelled in ("0", ""):
        return 0.0
    sign = -1.0 if spelled.startswith("-") else 1.0
    body = spelled.lstrip("+-")
    parts = _DURATION_PART.findall(body)
    if not parts or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(f"{text!r} is not a Go duration such as 5s, 750ms or 1m30s")
    return sign * sum(float(number) * _DURATION_UNIT_S[unit] for number, unit in parts)


def selector_text(selector: Any) -> str:
    """An objectSelector (matchLabels, matchExpressions) as label selector text; raises ValueError."""
    if not selector:
        return ""
    if not isinstance(selector, dict):
        raise ValueError("must be a mapping with matchLabels and/or matchExpressions")
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        spelled = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(operator)
        if spelled is None:
            raise ValueError(f"operator {operator!r} is not In, NotIn, Exists or DoesNotExist")
        parts.append(spelled)
    text = ",".join(parts)
    try:
        parse_selector(text)
    except SelectorError as exc:
        raise ValueError(str(exc)) from None
    return text


def _leaves(value: Any, pattern: str, shown: str) -> Iterator[tuple[str, str]]:
    """(pattern path, display path) of every set leaf; empty values and false count as unset."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, f"{pattern}.{key}", f"{shown}.{key}")
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for index, child in enumerate(value):
            yield from _leaves(child, f"{pattern}[]", f"{shown}[{index}]")
    elif value not in (None, "", [], {}, False):
        yield pattern, shown


def _unsupported(resource: CustomResource) -> list[str]:
    supported = _SUPPORTED[resource.ref.kind]
    found: list[str] = []
    for pattern, shown in _leaves(resource.spec, "spec", "spec"):
        if not any(
            pattern == s or pattern.startswith(f"{s}.") or pattern.startswith(f"{s}[") for s in supported
        ):
            found.append(shown)
    return found


def _errors_of(exc: ValidationError, paths: Mapping[str, str], fallback: str) -> list[FieldProblem]:
    """Pydantic errors with each location translated to the custom resource's field."""
    problems: list[FieldProblem] = []
    for item in exc.errors():
        loc = [str(part) for part in item["loc"]]
        head = loc[0] if loc else ""
        if head in paths:
            where = ".".join([paths[head], *loc[1:]])
        elif loc:
            where = ".".join([fallback, *loc])
        else:
            where = "spec"
        problems.append(FieldProblem(where, item["msg"]))
    return problems


def _validate(
    model: type[BaseModel], data: dict[str, Any], paths: Mapping[str, str], fallback: str
) -> tuple[Any, list[FieldProblem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, _errors_of(exc, paths, fallback)


def _pipeline(resource: CustomResource, report: ObjectReport) -> dict[str, Any]:
    extension = resource.spec.get("pipeline") or {}
    if not isinstance(extension, dict):
        report.errors.append(FieldProblem("spec.pipeline", "must be a mapping"))
        return {}
    return dict(extension)


_PROVIDER_PATHS = {
    "url": "spec.url",
    "default_branch": "spec.allowedBranches",
    "committer": "spec.commit.committer",
    "commit_window_s": "spec.push.commitWindow",
    "name": "metadata.name",
    "credentials_secret": "spec.secretRef",
    "known_hosts_ref": "spec.knownHostsRef",
}
_PROVIDER_MAPPED = frozenset(
    {"name", "url", "default_branch", "committer", "commit_window_s", "credentials_secret", "known_hosts_ref"}
)
# `spec.pipeline` fields that give credentials too: with `spec.secretRef` they are an error.
_ENV_CREDENTIALS = ("username_env", "password_env", "ssh.private_key_env", "ssh.private_key_file")


def _references(resource: CustomResource, extension: dict[str, Any], report: ObjectReport) -> dict[str, Any]:
    """`spec.secretRef` and `spec.knownHostsRef` as the provider's references, in the object's namespace.

    Only the reference travels in the configuration (and on the config topic); the commit worker
    reads the values from the cluster when it needs them.
    """
    spec = resource.spec
    found: dict[str, Any] = {}
    secret = spec.get("secretRef")
    if secret:
        name = secret.get("name") if isinstance(secret, dict) else None
        if not name:
            report.errors.append(FieldProblem("spec.secretRef.name", "names the Secret; it is required"))
        else:
            found["credentials_secret"] = {"namespace": resource.ref.namespace, "name": name}
        raw_ssh = extension.get("ssh")
        ssh: dict[str, Any] = raw_ssh if isinstance(raw_ssh, dict) else {}
        present = {
            "username_env": extension.get("username_env"),
            "password_env": extension.get("password_env"),
            **{f"ssh.{k}": ssh.get(k) for k in ("private_key_env", "private_key_file")},
        }
        for key in _ENV_CREDENTIALS:
            if present.get(key) is not None:
                report.errors.append(
                    FieldProblem(
                        f"spec.pipeline.{key}",
                        f"spec.secretRef and spec.pipeline.{key} both give credentials; keep one",
                    )
                )
    hosts = spec.get("knownHostsRef")
    if hosts:
        if not isinstance(hosts, dict) or not hosts.get("name"):
            report.errors.append(
                FieldProblem("spec.knownHostsRef.name", "names the ConfigMap or Secret; it is required")
            )
        else:
            found["known_hosts_ref"] = {
                "kind": hosts.get("kind") or "ConfigMap",
                "namespace": resource.ref.namespace,
                "name": hosts["name"],
            }
    return found


def _signing(resource: CustomResource, extension: dict[str, Any], report: ObjectReport) -> dict[str, Any]:
    """`spec.commit.signing.secretRef` as SSH signing with the key of that Secret (its namespace).

    Only the reference is published; the commit worker reads the key. `generateWhenMissing` is
    left to the unsupported fields: it would need `create`/`update` on Secrets (docs/secrets.md).
    """
    signing = (resource.spec.get("commit") or {}).get("signing")
    if not signing:
        return {}
    ref = signing.get("secretRef") if isinstance(signing, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    if not name:
        report.errors.append(
            FieldProblem(
                "spec.commit.signing.secretRef.name", "names the Secret with the signing key; it is required"
            )
        )
        return {}
    if extension.get("signing") is not None:
        report.errors.append(
            FieldProblem(
                "spec.pipeline.signing",
                "spec.commit.signing and spec.pipeline.signing both configure signing; keep one",
            )
        )
        return {}
    secret = {"namespace": resource.ref.namespace, "name": name}
    return {"signing": {"format": "ssh", "key_secret": secret}}


def _provider(resource: CustomResource, name: str, report: ObjectReport) -> ProviderSettings | None:
    spec = resource.spec
    extension = _pipeline(resource, report)
    for key in sorted(_PROVIDER_MAPPED & set(extension)):
        report.errors.append(FieldProblem(f"spec.pipeline.{key}", f"set by {_PROVIDER_PATHS[key]}, not here"))
    branches = spec.get("allowedBranches") or []
    literal = [b for b in branches if isinstance(b, str) and not _GLOB.search(b)]
    data: dict[str, Any] = {**extension, "name": name, "url": spec.get("url")}
    data.update(_references(resource, extension, report))
    signing = _signing(resource, extension, report)
    data.update(signing)
    paths = {**_PROVIDER_PATHS, "signing": "spec.commit.signing"} if signing else _PROVIDER_PATHS
    data["default_branch"] = literal[0] if literal else "main"
    committer = (spec.get("commit") or {}).get("committer") or {}
    if committer:
        data["committer"] = {
            k: str(v).strip() for k, v in committer.items() if k in ("name", "email") and str(v).strip()
        }
    window = (spec.get("push") or {}).get("commitWindow")
    if window is not None:
        try:
            data["commit_window_s"] = max(0.0, go_duration_s(str(window)))
        except ValueError as exc:
            report.errors.append(FieldProblem("spec.push.commitWindow", str(exc)))
    if report.errors:
        return None
    provider, errors = _validate(ProviderSettings, data, paths, "spec.pipeline")
    report.errors.extend(errors)
    return provider  # type: ignore[no-any-return]


def _branch_allowed(branch: str, patterns: Iterable[str]) -> bool:
    """Go's `path.Match`: `*` and `?` never cross `/`."""
    for pattern in patterns:
        regex = "".join("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in pattern)
        if re.fullmatch(regex, branch):
            return True
    return False


_TARGET_PATHS = {
    "name": "metadata.name",
    "provider": "spec.providerRef.name",
    "branch": "spec.branch",
    "path": "spec.path",
    "cluster": "spec.clusterProviderRef.name",
    "prune": "spec.prune.mode",
    "rules": "spec.rules",
    "encryption": "spec.pipeline.encryption",
}
_TARGET_MAPPED = frozenset({"name", "provider", "branch", "path", "cluster", "prune", "rules"})


def _target(
    resource: CustomResource,
    name: str,
    providers: Mapping[str, tuple[ProviderSettings, list[str]]],
    home_namespace: str,
    report: ObjectReport,
) -> dict[str, Any] | None:
    """The target's settings without rules (validated once the rules are known), or None."""
    spec = resource.spec
    extension = _pipeline(resource, report)
    for key in sorted(_TARGET_MAPPED & set(extension)):
        report.errors.append(FieldProblem(f"spec.pipeline.{key}", f"set by {_TARGET_PATHS[key]}, not here"))
    ref_field = "providerRef" if "providerRef" in spec else "gitProviderRef"
    provider_ref = spec.get(ref_field) or {}
    provider_name = provider_ref.get("name") if isinstance(provider_ref, dict) else None
    data: dict[str, Any] = {**extension, "name": name, "branch": spec.get("branch"), "path": spec.get("path")}
    if not provider_name:
        report.errors.append(FieldProblem("spec.providerRef.name", "names the GitProvider; it is required"))
    else:
        provider = providers.get(effective_name(resource.ref.namespace, provider_name, home_namespace))
        if provider is None:
            report.errors.append(
                FieldProblem(
                    f"spec.{ref_field}.name",
                    f"no valid GitProvider {resource.ref.namespace}/{provider_name}",
                )
            )
        else:
            settings, allowed = provider
            data["provider"] = settings.name
            branch = spec.get("branch")
            if isinstance(branch, str) and not _branch_allowed(branch, allowed):
                report.errors.append(
                    FieldProblem(
                        "spec.branch",
                        f"branch {branch!r} is not in spec.allowedBranches of GitProvider "
                        f"{resource.ref.namespace}/{provider_name}",
                    )
                )
    cluster = (spec.get("clusterProviderRef") or {}).get("name") or "default"
    data["cluster"] = cluster
    mode = (spec.get("prune") or {}).get("mode")
    if mode:
        data["prune"] = _PRUNE_MODES.get(str(mode).lower(), str(mode))
    encryption = _encryption(spec.get("encryption") or {}, extension.get("encryption"), report)
    if encryption is None:
        data.pop("encryption", None)
    else:
        data["encryption"] = encryption
    return None if report.errors else data


def _encryption(upstream: dict[str, Any], extension: Any, report: ObjectReport) -> dict[str, Any] | None:
    """SOPS+age from `spec.encryption` (age public keys) merged with `spec.pipeline.encryption`."""
    merged: dict[str, Any] = dict(extension) if isinstance(extension, dict) else {}
    if upstream:
        provider = upstream.get("provider") or "sops"
        age = upstream.get("age") or {}
        if provider != "sops":
            report.errors.append(
                FieldProblem("spec.encryption.provider", f"only sops is supported, not {provider!r}")
            )
        elif age.get("enabled"):
            keys = (age.get("recipients") or {}).get("publicKeys") or []
            merged["age_recipients"] = [*keys, *merged.get("age_recipients", [])]
    return merged or None


def _rule_items(
    resource: CustomResource, home_namespace: str, report: ObjectReport
) -> tuple[list[tuple[int, WatchRule]], list[ItemProblem]]:
    """Each `spec.rules[]` item as one WatchRule of the YAML file, or an ItemProblem."""
    rules: list[tuple[int, WatchRule]] = []
    problems: list[ItemProblem] = []
    cluster_kind = resource.ref.kind is Kind.CLUSTER_WATCH_RULE
    items = resource.spec.get("rules")
    if not isinstance(items, list) or not items:
        report.errors.append(FieldProblem("spec.rules", "needs at least one rule"))
        return rules, problems
    for index, item in enumerate(items):
        where = f"spec.rules[{index}]"
        if not isinstance(item, dict):
            report.errors.append(FieldProblem(where, "must be a mapping"))
            continue
        resources = [str(r) for r in item.get("resources") or []]
        groups = item.get("apiGroups")
        label = ",".join(resources) or "?"

        def refuse(reason: str, message: str, index: int = index, label: str = label) -> None:
            problems.append(ItemProblem(resource.ref, index, label, reason, message))

        operations = {str(op) for op in item.get("operations") or []}
        if cluster_kind and item.get("scope") not in (None, "", "Cluster"):
            refuse(
                "NamespacedScope",
                "a ClusterWatchRule selects cluster-scoped resources; use a WatchRule for namespaced ones",
            )
            continue
        entries = [_entry(str(g), r) for g in groups for r in resources] if groups else resources
        data: dict[str, Any] = {"resources": entries}
        if operations and "*" not in operations and operations != ALL_OPERATIONS:
            data["operations"] = sorted(operations)
        if not cluster_kind:
            source = item.get("sourceNamespace") or resource.ref.namespace
            if source != resource.ref.namespace and resource.ref.namespace != home_namespace:
                refuse(
                    "SourceNamespaceForbidden",
                    f"only a WatchRule in the controller's namespace {home_namespace!r} may watch "
                    f"another namespace ({source!r})",
                )
                continue
            if source == "*":
                data["cluster_wide"] = True
            else:
                data["namespaces"] = [source]
        try:
            data["label_selector"] = selector_text(item.get("objectSelector"))
        except ValueError as exc:
            report.errors.append(FieldProblem(f"{where}.objectSelector", str(exc)))
            continue
        rule, errors = _validate(
            WatchRule,
            data,
            {
                "resources": f"{where}.resources",
                "namespaces": f"{where}.sourceNamespace",
                "cluster_wide": f"{where}.sourceNamespace",
                "label_selector": f"{where}.objectSelector",
                "operations": f"{where}.operations",
            },
            where,
        )
        report.errors.extend(errors)
        if rule is not None:
            rules.append((index, rule))
    return rules, problems


def _entry(group: str, resource: str) -> str:
    """One file-syntax entry for an apiGroups x resources pair: `group/resource`, a bare name for
    the core group (looked up as the file does), and `/*` for every core resource."""
    if group:
        return f"{group}/{resource}"
    return f"/{resource}" if resource == WILDCARD else resource


def _rule_target(resource: CustomResource, home_namespace: str, report: ObjectReport) -> str | None:
    ref = resource.spec.get("targetRef") or {}
    if not isinstance(ref, dict) or not ref.get("name"):
        report.errors.append(FieldProblem("spec.targetRef.name", "names the GitTarget; it is required"))
        return None
    if (
        ref.get("kind", "GitTarget") != "GitTarget"
        or ref.get("group", "configbutler.ai") != "configbutler.ai"
    ):
        report.errors.append(FieldProblem("spec.targetRef", "must reference a configbutler.ai GitTarget"))
        return None
    if resource.ref.kind is Kind.CLUSTER_WATCH_RULE:
        namespace = ref.get("namespace")
        if not namespace:
            report.errors.append(
                FieldProblem("spec.targetRef.namespace", "is required for a ClusterWatchRule")
            )
            return None
    else:
        namespace = resource.ref.namespace
    return effective_name(str(namespace), str(ref["name"]), home_namespace)


def compile_resources(
    objects: Iterable[CustomResource], *, home_namespace: str, base: Settings | None = None
) -> CompiledConfig:
    """The effective providers and targets of `objects`, checked together with `base`'s clusters."""
    base = base if base is not None else Settings()
    reports: dict[ObjectRef, ObjectReport] = {}
    by_kind: dict[Kind, list[CustomResource]] = {kind: [] for kind in Kind}
    for resource in sorted(objects, key=lambda r: r.ref):
        report = ObjectReport(resource.ref, resource.generation, unsupported=_unsupported(resource))
        if resource.ref in reports:
            report.errors.append(FieldProblem("metadata.name", "the same object appears twice"))
            continue
        reports[resource.ref] = report
        by_kind[resource.ref.kind].append(resource)

    def name_of(resource: CustomResource) -> str:
        return effective_name(resource.ref.namespace, resource.ref.name, home_namespace)

    providers: dict[str, tuple[ProviderSettings, list[str]]] = {}
    for resource in by_kind[Kind.GIT_PROVIDER]:
        provider = _provider(resource, name_of(resource), reports[resource.ref])
        if provider is not None:
            providers[provider.name] = (
                provider,
                [str(b) for b in resource.spec.get("allowedBranches") or []],
            )

    rules: dict[str, list[tuple[RuleOrigin, WatchRule]]] = {}
    item_problems: list[ItemProblem] = []
    rule_objects: dict[str, list[ObjectRef]] = {}
    for resource in by_kind[Kind.WATCH_RULE] + by_kind[Kind.CLUSTER_WATCH_RULE]:
        report = reports[resource.ref]
        if "sourceNamespace" in resource.spec:
            report.errors.append(
                FieldProblem("spec.sourceNamespace", "moved to spec.rules[].sourceNamespace")
            )
        target = _rule_target(resource, home_namespace, report)
        items, problems = _rule_items(resource, home_namespace, report)
        if report.errors or target is None:
            continue
        item_problems.extend(problems)
        rule_objects.setdefault(target, []).append(resource.ref)
        rules.setdefault(target, []).extend((RuleOrigin(resource.ref, index), rule) for index, rule in items)

    targets: list[TargetSettings] = []
    origins: dict[str, list[RuleOrigin]] = {}
    # Checked as a file of its own (the base may be in custom-resource mode, which lists none).
    accepted = base.model_copy(
        update={
            "providers": [p for p, _ in providers.values()],
            "targets": [],
            "custom_resources": CustomResourceSettings(),
        }
    )
    for resource in by_kind[Kind.GIT_TARGET]:
        report = reports[resource.ref]
        name = name_of(resource)
        data = _target(resource, name, providers, home_namespace, report)
        if data is None:
            continue
        mine = rules.get(name, [])
        data["rules"] = [rule.model_dump() for _, rule in mine]
        target, errors = _validate(TargetSettings, data, _TARGET_PATHS, "spec.pipeline")
        report.errors.extend(errors)
        if target is None:
            continue
        try:
            accepted = Settings.model_validate(
                {
                    **accepted.model_dump(),
                    "targets": [*(t.model_dump() for t in targets), target.model_dump()],
                }
            )
        except ValidationError as exc:
            report.errors.extend(FieldProblem("spec", item["msg"]) for item in exc.errors())
            continue
        targets.append(target)
        origins[name] = [origin for origin, _ in mine]
    known = {t.name for t in targets}
    for target_name, refs in rule_objects.items():
        if target_name not in known:
            for ref in refs:
                reports[ref].errors.append(
                    FieldProblem("spec.targetRef.name", f"no valid GitTarget {target_name}")
                )
    item_problems = [p for p in item_problems if reports[p.ref].accepted]
    return CompiledConfig(
        providers=[p for p, _ in providers.values()],
        targets=targets,
        reports=reports,
        origins=origins,
        item_problems=item_problems,
    )
