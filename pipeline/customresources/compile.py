"""Custom resources to the YAML file's providers, targets and rules, with a report per object.

A pure function of the objects (no I/O), so the offline `reverser config check`, the controller
and the tests share it. Every object is validated by the same pydantic models as the YAML file;
an error names the custom resource's field (`spec.rules[1].objectSelector`), never the YAML one.
An invalid object is left out and reported; it never takes valid objects down with it. Fields
this project does not act on are accepted and listed as unsupported (docs/custom-resources.md).

What an object outside the controller's namespace may ask for is decided by the tenant boundary
(`pipeline.customresources.tenancy`), asked about every object here. Every object is compiled on
its own step budget and behind its own guard, so a huge, slow or malformed object becomes that
object's error and never the whole compile's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from pipeline.authormode import AttributionMode, mode_of_enabled
from pipeline.config import (
    ClusterSettings,
    CustomResourceSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.customresources.agekeys import SECRET_REF_FIELD, KeyResolution, KeySource, key_source
from pipeline.customresources.clusterconnection import SUPPORTED_PATHS as CONNECTION_PATHS
from pipeline.customresources.clusterconnection import (
    ClusterConnection,
    effective_clusters,
    merged,
    read_connection,
)
from pipeline.customresources.clusterprovider import (
    OVERRIDE_FIELDS,
    ClusterProviders,
    NamespaceLabels,
    SourceRefusal,
)
from pipeline.customresources.commitmessages import SUPPORTED_PATHS as MESSAGE_PATHS
from pipeline.customresources.commitmessages import message_templates
from pipeline.customresources.objects import CONFIG_KINDS, CustomResource, Kind, ObjectRef, effective_name
from pipeline.customresources.problems import FieldProblem
from pipeline.customresources.selectors import selector_text
from pipeline.customresources.tenancy import (
    BudgetExceeded,
    CompileLimits,
    StepMeter,
    TenantBoundary,
    age_order,
)
from pipeline.customresources.typos import meant_field
from pipeline.gitnames import paths_overlap
from pipeline.globs import GlobError, check_glob, glob_match
from pipeline.prune import Prune
from pipeline.sealing.sealer import digest_key_problem
from pipeline.targetrules import ALL_OPERATIONS, WILDCARD

__all__ = [
    "OFFLINE",
    "ClusterReads",
    "CompiledConfig",
    "FieldProblem",
    "ItemProblem",
    "ObjectReport",
    "RuleOrigin",
    "compile_resources",
    "go_duration_s",
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
        "spec.commit.signing.generateWhenMissing",
        *MESSAGE_PATHS,
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
        "spec.encryption.age.recipients.extractFromSecret",
        "spec.encryption.age.recipients.generateWhenMissing",
        "spec.encryption.secretRef.name",
        "spec.encryption.secretRef.kind",
        "spec.attribution.enabled",
        "spec.placement.byType",
        "spec.placement.default",
        *MESSAGE_PATHS,
        "spec.allowedSourceNamespaces.names",
        "spec.allowedSourceNamespaces.selector",
        "spec.pipeline",
    ),
    Kind.WATCH_RULE: (
        "spec.targetRef",
        "spec.rules[].resources",
        "spec.rules[].apiGroups",
        "spec.rules[].sourceNamespace",
        "spec.rules[].objectSelector",
        "spec.rules[].operations",
        "spec.rules[].apiVersions",
    ),
    Kind.CLUSTER_PROVIDER: (
        "spec.allowedNamespaces.names",
        "spec.allowedNamespaces.selector",
        "spec.accessFrom.names",
        "spec.accessFrom.selector",
        *(f"spec.{flag}" for flag in OVERRIDE_FIELDS),
        *CONNECTION_PATHS,
    ),
    Kind.CLUSTER_WATCH_RULE: (
        "spec.targetRef",
        "spec.rules[].resources",
        "spec.rules[].apiGroups",
        "spec.rules[].objectSelector",
        "spec.rules[].operations",
        "spec.rules[].apiVersions",
        "spec.rules[].scope",
    ),
}
# a GitTarget's prune mode in any letter case, as the CRD's users write it
_PRUNE_MODES = {mode.value.lower(): mode.value for mode in Prune}
_GLOB = re.compile(r"[*?\[\\]")
_T = TypeVar("_T")
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
    #: compile steps spent in all (each object's are capped by `CompileLimits.object_steps`)
    steps: int = 0
    #: the clusters ClusterProviders change or add (clusterconnection.py); the file's others stand
    clusters: list[ClusterSettings] = field(default_factory=list)

    def settings(self, base: Settings) -> Settings:
        """`base` (the static file: log, audit, ...) with these providers, targets and clusters."""
        return base.model_copy(
            update={
                "providers": self.providers,
                "targets": self.targets,
                "clusters": merged(base.clusters, self.clusters),
            }
        )

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


def _get(value: Any, *keys: str) -> Any:
    """`value[k1][k2]...`, or None where a level is missing or not a mapping (reported unsupported)."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


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


def _unsupported(resource: CustomResource, meter: StepMeter) -> list[str]:
    supported = _SUPPORTED[resource.ref.kind]
    found: list[str] = []
    for pattern, shown in _leaves(resource.spec, "spec", "spec"):
        meter.spend(len(supported))
        if not any(
            pattern == s or pattern.startswith(f"{s}.") or pattern.startswith(f"{s}[") for s in supported
        ):
            found.append(shown)
    return found


def _errors_of(exc: ValidationError, paths: Mapping[str, str], fallback: str) -> list[FieldProblem]:
    """Pydantic errors with each location translated to the custom resource's field.

    `paths` maps a field (or a dotted path into one, `signing.key_secret`) to the field the user
    wrote; the longest mapped prefix of a location wins.
    """
    problems: list[FieldProblem] = []
    for item in exc.errors():
        loc = [str(part) for part in item["loc"]]
        mapped = next((i for i in range(len(loc), 0, -1) if ".".join(loc[:i]) in paths), 0)
        if mapped:
            where = _field_path(paths[".".join(loc[:mapped])], loc[mapped:])
        elif loc:
            where = _field_path(fallback, loc)
        else:
            where = "spec"
        problems.append(FieldProblem(where, item["msg"]))
    return problems


def _field_path(base: str, parts: list[str]) -> str:
    """`base` and the rest of a location the way the rest of this module spells fields:
    `publicKeys[0]`, as `spec.rules[1]`, not `publicKeys.0`."""
    return base + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in parts)


def _validate(
    model: type[BaseModel], data: dict[str, Any], paths: Mapping[str, str], fallback: str
) -> tuple[Any, list[FieldProblem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, _errors_of(exc, paths, fallback)


def _pipeline(
    resource: CustomResource, mapped: Mapping[str, str], boundary: TenantBoundary, report: ObjectReport
) -> dict[str, Any]:
    """`spec.pipeline`; a field an upstream field sets (`mapped`: field to upstream path) is an
    error naming that field, and the rest must pass the tenant boundary."""
    extension = resource.spec.get("pipeline") or {}
    if not isinstance(extension, dict):
        report.errors.append(FieldProblem("spec.pipeline", "must be a mapping"))
        return {}
    extension = {str(key): value for key, value in extension.items()}
    for key in sorted(mapped.keys() & extension.keys()):
        report.errors.append(FieldProblem(f"spec.pipeline.{key}", f"set by {mapped[key]}, not here"))
    rest = {key: value for key, value in extension.items() if key not in mapped}
    report.errors.extend(boundary.pipeline_problems(resource, rest))
    return extension


_PROVIDER_PATHS = {
    "url": "spec.url",
    "default_branch": "spec.allowedBranches",
    "committer": "spec.commit.committer",
    "commit_window_s": "spec.push.commitWindow",
    "name": "metadata.name",
    "credentials_secret": "spec.secretRef",
    "known_hosts_ref": "spec.knownHostsRef",
}
# `spec.pipeline` fields an upstream field sets: an error there, naming the upstream field.
_PROVIDER_MAPPED = _PROVIDER_PATHS
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
    the configuration controller's (signingkeys.py): it makes the key once, in that Secret.
    """
    signing = _get(resource.spec, "commit", "signing")
    if not signing:
        return {}
    name = _get(signing, "secretRef", "name")
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


def _allowed_branches(spec: dict[str, Any], report: ObjectReport) -> list[str]:
    """`spec.allowedBranches` with every pattern checked as Go's `path.Match` would parse it."""
    branches = spec.get("allowedBranches") or []
    if not isinstance(branches, list) or not all(isinstance(b, str) for b in branches):
        report.errors.append(FieldProblem("spec.allowedBranches", "must be a list of branch names or globs"))
        return []
    for index, pattern in enumerate(branches):
        try:
            check_glob(pattern)
        except GlobError as exc:
            report.errors.append(FieldProblem(f"spec.allowedBranches[{index}]", f"not a glob: {exc}"))
    return list(branches)


def _provider(
    resource: CustomResource, name: str, boundary: TenantBoundary, report: ObjectReport
) -> ProviderSettings | None:
    spec = resource.spec
    extension = _pipeline(resource, _PROVIDER_MAPPED, boundary, report)
    branches = _allowed_branches(spec, report)
    literal = [b for b in branches if not _GLOB.search(b)]
    data: dict[str, Any] = {**extension, "name": name, "url": spec.get("url")}
    data.update(_references(resource, extension, report))
    signing = _signing(resource, extension, report)
    data.update(signing)
    paths = (
        {
            **_PROVIDER_PATHS,
            "signing": "spec.commit.signing",
            "signing.key_secret": "spec.commit.signing.secretRef",
        }
        if signing
        else _PROVIDER_PATHS
    )
    data["default_branch"] = literal[0] if literal else "main"
    committer = _get(spec, "commit", "committer") or {}
    if isinstance(committer, dict) and committer:
        data["committer"] = {
            k: str(v).strip() for k, v in committer.items() if k in ("name", "email") and str(v).strip()
        }
    window = _get(spec, "push", "commitWindow")
    if window is not None:
        try:
            seconds = go_duration_s(str(window))
        except ValueError as exc:
            report.errors.append(FieldProblem("spec.push.commitWindow", str(exc)))
        else:
            if seconds < 0:
                report.errors.append(FieldProblem("spec.push.commitWindow", f"{window!r} is negative"))
            data["commit_window_s"] = seconds
    if report.errors:
        return None
    provider, errors = _validate(ProviderSettings, data, paths, "spec.pipeline")
    report.errors.extend(errors)
    if provider is not None:
        report.errors.extend(boundary.url_problems(resource.ref.namespace, provider.url))
        report.errors.extend(_outside(boundary, resource, provider))
    return None if report.errors else provider


def _outside(
    boundary: TenantBoundary, resource: CustomResource, settings: ProviderSettings | TargetSettings
) -> list[FieldProblem]:
    """The boundary's last check of accepted settings, as errors (none unless a check above missed)."""
    return [
        FieldProblem(f"spec.pipeline.{name}", "reaches outside the object's namespace")
        for name in boundary.reaches_outside(resource.ref.namespace, settings)
    ]


def _branch_allowed(branch: str, patterns: Iterable[str], meter: StepMeter) -> bool:
    """Go's `path.Match`: `*` and `?` never cross `/` (linear: no pattern backtracks)."""
    for pattern in patterns:
        meter.spend(len(pattern) * (len(branch) + 1))
        if glob_match(pattern, branch):
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
    "placement": "spec.placement",
    "placement.by_type": "spec.placement.byType",
    "placement.default": "spec.placement.default",
}
_TARGET_MAPPED = {key: path for key, path in _TARGET_PATHS.items() if key != "encryption" and "." not in key}


def _target_paths(spec: Mapping[str, Any]) -> Mapping[str, str]:
    """Where a TargetSettings error is reported: encryption at the field the user wrote it in."""
    pipeline = spec.get("pipeline")
    if isinstance(pipeline, dict) and "encryption" in pipeline:
        return _TARGET_PATHS
    return {
        **_TARGET_PATHS,
        "encryption": "spec.encryption",
        "encryption.age_recipients": "spec.encryption.age.recipients.publicKeys",
        "encryption.age_key_secret": "spec.encryption.secretRef",
    }


class _Referents(NamedTuple):
    """What a GitTarget may refer to: the valid providers (with their allowed branches), the
    cluster providers, and the age key Secrets read (None: offline)."""

    providers: Mapping[str, tuple[ProviderSettings, list[str]]]
    clusters: ClusterProviders
    age_keys: Mapping[KeySource, KeyResolution] | None


def _target(
    resource: CustomResource,
    name: str,
    referents: _Referents,
    boundary: TenantBoundary,
    report: ObjectReport,
    meter: StepMeter,
) -> dict[str, Any] | None:
    """The target's settings without rules (validated once the rules are known), or None."""
    providers, clusters, age_keys = referents
    spec = resource.spec
    namespace = resource.ref.namespace
    extension = _pipeline(resource, _TARGET_MAPPED, boundary, report)
    report.errors.extend(boundary.path_problems(namespace, spec.get("path")))
    ref_field = "providerRef" if "providerRef" in spec else "gitProviderRef"
    provider_name = _get(spec, ref_field, "name")
    data: dict[str, Any] = {**extension, "name": name, "branch": spec.get("branch"), "path": spec.get("path")}
    if not provider_name:
        report.errors.append(FieldProblem("spec.providerRef.name", "names the GitProvider; it is required"))
    else:
        provider = providers.get(effective_name(namespace, str(provider_name), boundary.home_namespace))
        if provider is None:
            report.errors.append(
                FieldProblem(f"spec.{ref_field}.name", f"no valid GitProvider {namespace}/{provider_name}")
            )
        else:
            settings, allowed = provider
            data["provider"] = settings.name
            branch = spec.get("branch")
            if isinstance(branch, str) and len(branch) > boundary.limits.branch_chars:
                report.errors.append(
                    FieldProblem("spec.branch", f"is longer than {boundary.limits.branch_chars} characters")
                )
            elif isinstance(branch, str) and not _branch_allowed(branch, allowed, meter):
                report.errors.append(
                    FieldProblem(
                        "spec.branch",
                        f"branch {branch!r} is not in spec.allowedBranches of GitProvider "
                        f"{namespace}/{provider_name}",
                    )
                )
    data["cluster"] = _get(spec, "clusterProviderRef", "name") or "default"
    report.errors.extend(boundary.cluster_problems(namespace, str(data["cluster"])))
    report.errors.extend(clusters.target_problems(namespace, str(data["cluster"])))
    mode = _get(spec, "prune", "mode")
    if mode:
        data["prune"] = _PRUNE_MODES.get(str(mode).lower(), str(mode))
    enabled = _get(spec, "attribution", "enabled")
    if enabled is not None:
        author_mode = _attribution(enabled, "attribution" in extension, report)
        if author_mode is not None:
            data["attribution"] = author_mode
    placement = _placement(spec.get("placement"), report)
    if placement is not None:
        data["placement"] = placement
    encryption = _encryption(
        spec.get("encryption") or {}, extension.get("encryption"), namespace, age_keys, report
    )
    if encryption is None:
        data.pop("encryption", None)
    else:
        data["encryption"] = encryption
    return None if report.errors else data


def _placement(placement: Any, report: ObjectReport) -> dict[str, Any] | None:
    """gitops-reverser's `spec.placement` in this project's spelling (`targets[].placement`); its
    templates are checked when the target's settings are validated, errors naming
    `spec.placement.byType` or `spec.placement.default`."""
    if placement is None:
        return None
    if not isinstance(placement, dict):
        report.errors.append(FieldProblem("spec.placement", "must be a mapping"))
        return None
    by_type = placement.get("byType") or {}
    if not isinstance(by_type, dict):
        report.errors.append(FieldProblem("spec.placement.byType", "must be a mapping of type to template"))
        return None
    return {"by_type": by_type, "default": placement.get("default")}


def _attribution(enabled: Any, extension_sets_it: bool, report: ObjectReport) -> AttributionMode | None:
    """gitops-reverser's switch (`attribution.enabled`, here per target) as this project's mode.

    `spec.pipeline.attribution` says the same in this project's spelling; both at once is an error
    naming both, so the two can never disagree silently.
    """
    if not isinstance(enabled, bool):
        report.errors.append(FieldProblem("spec.attribution.enabled", "must be true or false"))
        return None
    if extension_sets_it:
        report.errors.append(
            FieldProblem(
                "spec.pipeline.attribution",
                "spec.attribution.enabled and spec.pipeline.attribution both set the mode; keep one",
            )
        )
        return None
    return mode_of_enabled(enabled)


def _encryption(
    upstream: Any,
    extension: Any,
    namespace: str,
    age_keys: Mapping[KeySource, KeyResolution] | None,
    report: ObjectReport,
) -> dict[str, Any] | None:
    """SOPS+age from `spec.encryption` merged with `spec.pipeline.encryption`.

    The recipients are `age.recipients.publicKeys` plus, with `extractFromSecret`, the public keys
    of the `secretRef` Secret's `*.agekey` entries as the controller read them (`age_keys`; None
    offline, where the Secret is only named). A key Secret that yields none is this target's error
    at `spec.encryption.secretRef`, naming the Secret and the entry: the target stalls, the rest of
    the configuration does not.
    """
    merged: dict[str, Any] = dict(extension) if isinstance(extension, dict) else {}
    if not upstream:
        return merged or None
    if not isinstance(upstream, dict):
        report.errors.append(FieldProblem("spec.encryption", "must be a mapping"))
        return None
    provider = upstream.get("provider") or "sops"
    if provider != "sops":
        report.errors.append(
            FieldProblem("spec.encryption.provider", f"only sops is supported, not {provider!r}")
        )
    elif _get(upstream, "age", "enabled"):
        keys = _get(upstream, "age", "recipients", "publicKeys") or []
        more = merged.get("age_recipients") or []
        if not isinstance(keys, list) or not isinstance(more, list):
            report.errors.append(FieldProblem("spec.encryption.age.recipients.publicKeys", "must be a list"))
            return None
        recipients = [*keys, *more]
        source, problems = key_source(namespace, upstream)
        report.errors.extend(problems)
        if source is not None:
            merged["age_key_secret"] = {"namespace": source.namespace, "name": source.name}
            merged["generate_age_key"] = source.generate
            if age_keys is not None:
                found = age_keys.get(source) or KeyResolution(
                    error=f"Secret {source.describe()} was not read yet"
                )
                if found.recipients:
                    recipients += found.recipients
                else:
                    report.errors.append(FieldProblem(SECRET_REF_FIELD, found.error))
        merged["age_recipients"] = recipients
    return merged or None


def _rule_items(
    resource: CustomResource,
    boundary: TenantBoundary,
    report: ObjectReport,
    meter: StepMeter,
    source_gate: Callable[[str], SourceRefusal | None],
) -> tuple[list[tuple[int, WatchRule]], list[ItemProblem]]:
    """Each `spec.rules[]` item as one WatchRule of the YAML file, or an ItemProblem.

    `source_gate` says whether an item may watch the namespace it names (clusterprovider.py)."""
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
        listed = {key: item.get(key) or [] for key in ("resources", "apiGroups", "operations", "apiVersions")}
        wrong = [key for key, value in listed.items() if not isinstance(value, list)]
        if wrong:
            report.errors.extend(FieldProblem(f"{where}.{key}", "must be a list") for key in wrong)
            continue
        resources = [str(r) for r in listed["resources"]]
        groups = [str(g) for g in listed["apiGroups"]]
        label = ",".join(resources) or "?"

        def refuse(reason: str, message: str, index: int = index, label: str = label) -> None:
            problems.append(ItemProblem(resource.ref, index, label, reason, message))

        operations = {str(op) for op in listed["operations"]}
        if cluster_kind and item.get("scope") not in (None, "", "Cluster"):
            refuse(
                "NamespacedScope",
                "a ClusterWatchRule selects cluster-scoped resources; use a WatchRule for namespaced ones",
            )
            continue
        entries = [_entry(g, r) for g in groups for r in resources] if groups else resources
        meter.spend(len(entries) + 1)
        data: dict[str, Any] = {"resources": entries}
        if operations and "*" not in operations and operations != ALL_OPERATIONS:
            data["operations"] = sorted(operations)
        versions = [str(v) for v in listed["apiVersions"]]
        if versions and "*" not in versions:
            data["versions"] = list(dict.fromkeys(versions))
        if not cluster_kind:
            source = str(item.get("sourceNamespace") or resource.ref.namespace)
            refusal = source_gate(source)
            if refusal is not None:
                refuse(refusal.reason, refusal.message)
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
                "versions": f"{where}.apiVersions",
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


def _isolated(report: ObjectReport, meter: StepMeter, work: Callable[[], _T]) -> _T | None:
    """`work()` for one object; its budget running out, or a field of a shape no check foresaw,
    becomes that object's error instead of ending the compile of everyone's objects."""
    try:
        return work()
    except BudgetExceeded as exc:
        report.errors.append(FieldProblem("spec", f"{exc}; make the object smaller"))
    except Exception as exc:  # isolation: one object's surprise must not refuse every version
        report.errors.append(FieldProblem("spec", f"cannot be compiled ({type(exc).__name__})"))
    return None


@dataclass(frozen=True, slots=True)
class _Claim:
    """A folder an accepted target writes, and who holds it (for the overlap message)."""

    folder: str
    target: str
    resource: CustomResource


class _Folders:
    """Which target writes which folder of which branch: the first to claim one keeps it.

    Targets are offered in the order that decides (the home namespace, then the oldest), so a
    newcomer never takes a folder from a running target, whatever its namespace sorts as.
    """

    def __init__(self, boundary: TenantBoundary) -> None:
        self._boundary = boundary
        self._claims: dict[tuple[str, str], list[_Claim]] = {}

    def claim(
        self,
        resource: CustomResource,
        target: str,
        destination: tuple[str, str, str],
        url: str,
        meter: StepMeter,
    ) -> FieldProblem | None:
        """None once `resource` holds the folder; else why not, naming the target that holds it."""
        repository, branch, folder = destination
        held = self._claims.setdefault((repository, branch), [])
        meter.spend(len(held))
        for other in held:
            if paths_overlap(folder, other.folder):
                return FieldProblem(
                    "spec.path",
                    f"folder {folder or '/'} on branch {branch} of {url} overlaps folder "
                    f"{other.folder or '/'} of target {other.target} ({other.resource.ref.describe()}), "
                    f"which keeps it: {self._because(other.resource, resource)}",
                )
        held.append(_Claim(folder, target, resource))
        return None

    def _because(self, holder: CustomResource, newcomer: CustomResource) -> str:
        home = self._boundary.is_home
        if home(holder.ref.namespace) and not home(newcomer.ref.namespace):
            return f"it is in the controller's namespace {self._boundary.home_namespace!r}"
        if holder.created_at is not None and newcomer.created_at is not None:
            return f"it is older (created {holder.created_at.isoformat()})"
        return "it comes first by namespace and name (no creation time tells which is older)"


def _trim(report: ObjectReport, limits: CompileLimits) -> None:
    """Keep a report within the limits: it travels in the config record and in the status."""
    cut = limits.message_chars
    errors = [FieldProblem(e.path[:cut], e.message[:cut]) for e in report.errors]
    if len(errors) > limits.reported_errors:
        more = len(errors) - limits.reported_errors
        errors = [*errors[: limits.reported_errors], FieldProblem("spec", f"and {more} more errors")]
    report.errors = errors
    if len(report.unsupported) > limits.reported_unsupported:
        more = len(report.unsupported) - limits.reported_unsupported
        report.unsupported = [*report.unsupported[: limits.reported_unsupported], f"and {more} more"]
    report.unsupported = [path[:cut] for path in report.unsupported]


@dataclass(frozen=True, slots=True)
class ClusterReads:
    """What the controller read besides the custom resources; None each: not read (offline).

    `age_keys` are the key Secrets (`pipeline.customresources.agekeys`); without them everything
    else about a GitTarget that names one is checked. `environ` is the controller's environment,
    which every replica's pods share: a target with encryption whose digest key variable it lacks
    is that target's error. `namespace_labels` are the Namespaces' labels, for the namespace
    policies' label selectors (`pipeline.customresources.clusterprovider`).
    """

    age_keys: Mapping[KeySource, KeyResolution] | None = None
    environ: Mapping[str, str] | None = None
    namespace_labels: NamespaceLabels = None


#: Nothing read from the cluster (offline checks).
OFFLINE: Final = ClusterReads()


def compile_resources(
    objects: Iterable[CustomResource],
    *,
    home_namespace: str,
    base: Settings | None = None,
    limits: CompileLimits | None = None,
    excluded: Mapping[ObjectRef, str] | None = None,
    reads: ClusterReads = OFFLINE,
) -> CompiledConfig:
    """The effective providers and targets of `objects`, checked together with `base`'s clusters
    and with what the controller read besides them (`reads`; offline: nothing).

    `base.custom_resources.tenants` is the platform's grant to other namespaces (none: they get no
    provider or target). `excluded` objects are left out with the message given (the config record
    would not fit with them). Never raises for any object: each problem is its object's error.
    """
    base = base if base is not None else Settings()
    home_cluster = base.custom_resources.cluster or (base.clusters[0].name if base.clusters else "default")
    boundary = TenantBoundary.of(home_namespace, base.custom_resources.tenants, limits, home_cluster)
    excluded = excluded or {}
    reports: dict[ObjectRef, ObjectReport] = {}
    unique: list[CustomResource] = []
    for resource in sorted(objects, key=lambda r: r.ref):
        if resource.ref.kind not in CONFIG_KINDS:
            continue  # an action on a target, not configuration (commitrequest.py)
        if resource.ref not in reports:
            reports[resource.ref] = ObjectReport(resource.ref, resource.generation)
            unique.append(resource)
    for resource in unique:
        report = reports[resource.ref]
        if resource.ref in excluded:
            report.errors.append(FieldProblem("spec", excluded[resource.ref]))
        else:
            report.errors.extend(boundary.size_problems(resource))
    # a namespace's share counts the objects that are not refused anyway
    crowded = boundary.namespace_problems(r for r in unique if reports[r.ref].accepted)
    by_kind: dict[Kind, list[CustomResource]] = {kind: [] for kind in Kind}
    meters: dict[ObjectRef, StepMeter] = {}
    for resource in unique:
        report = reports[resource.ref]
        if resource.ref in crowded:
            report.errors.append(crowded[resource.ref])
        if report.errors:
            continue
        meter = meters[resource.ref] = StepMeter(boundary.limits.object_steps)
        unsupported = _isolated(report, meter, partial(_unsupported, resource, meter))
        if unsupported is not None:
            typos = [(path, meant_field(path, _SUPPORTED[resource.ref.kind])) for path in unsupported]
            report.errors.extend(
                FieldProblem(path, f"unknown field (did you mean {meant}?)") for path, meant in typos if meant
            )
            if report.errors:
                continue
            report.unsupported = unsupported
            by_kind[resource.ref.kind].append(resource)

    def name_of(resource: CustomResource) -> str:
        return effective_name(resource.ref.namespace, resource.ref.name, home_namespace)

    providers: dict[str, tuple[ProviderSettings, list[str]]] = {}
    provider_messages: dict[str, dict[str, str]] = {}
    for resource in by_kind[Kind.GIT_PROVIDER]:
        report = reports[resource.ref]
        provider = _isolated(
            report,
            meters[resource.ref],
            partial(_provider, resource, name_of(resource), boundary, report),
        )
        messages = message_templates(resource.spec, report.errors)
        if provider is not None and report.accepted:
            provider_messages[provider.name] = messages
            providers[provider.name] = (
                provider,
                [str(b) for b in resource.spec.get("allowedBranches") or []],
            )

    clusters = ClusterProviders(by_kind[Kind.CLUSTER_PROVIDER], home_namespace, reads.namespace_labels)
    connections: dict[str, tuple[ObjectRef, ClusterConnection]] = {}
    for resource in by_kind[Kind.CLUSTER_PROVIDER]:
        report = reports[resource.ref]
        report.errors.extend(clusters.problems.get(resource.ref.name, []))
        connection = read_connection(resource, report.errors, report.unsupported)
        if report.accepted:
            connections[connection.name] = (resource.ref, connection)
    changed_clusters, unbuilt = effective_clusters(
        base, (connection for _, connection in connections.values()), home_namespace
    )
    for name, problem in unbuilt.items():
        reports[connections[name][0]].errors.append(problem)
    targets_named = {name_of(t): t for t in by_kind[Kind.GIT_TARGET]}
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
        owner = targets_named.get(target or "")
        gate = partial(clusters.source_refusal, resource.ref.namespace, target=owner)
        compiled_items = _isolated(
            report,
            meters[resource.ref],
            partial(_rule_items, resource, boundary, report, meters[resource.ref], gate),
        )
        if report.errors or target is None or compiled_items is None:
            continue
        items, problems = compiled_items
        item_problems.extend(problems)
        rule_objects.setdefault(target, []).append(resource.ref)
        rules.setdefault(target, []).extend((RuleOrigin(resource.ref, index), rule) for index, rule in items)

    accepted: list[tuple[ObjectRef, TargetSettings]] = []
    origins: dict[str, list[RuleOrigin]] = {}
    # Each target is checked in a file of its own with its provider (the base may be in
    # custom-resource mode, which lists none); folders are checked here, where the winner is known.
    alone = base.model_copy(
        update={
            "providers": [],
            "targets": [],
            # the cluster holding the custom resources (and kubeconfig Secrets) stays the same one
            "custom_resources": CustomResourceSettings(cluster=base.custom_resources.cluster),
            "clusters": merged(base.clusters, changed_clusters),
        }
    ).model_dump()
    folders = _Folders(boundary)
    referents = _Referents(providers, clusters, reads.age_keys)

    def accept(resource: CustomResource, report: ObjectReport) -> None:
        name = name_of(resource)
        meter = meters[resource.ref]
        data = _target(resource, name, referents, boundary, report, meter)
        own_messages = message_templates(resource.spec, report.errors)
        if data is None or report.errors:
            return
        templates = {**provider_messages.get(str(data.get("provider")), {}), **own_messages}
        if templates:
            data["commit_message"] = {**(data.get("commit_message") or {}), **templates}
        mine = rules.get(name, [])
        data["rules"] = [rule.model_dump() for _, rule in mine]
        target, errors = _validate(TargetSettings, data, _target_paths(resource.spec), "spec.pipeline")
        report.errors.extend(errors)
        if target is None:
            return
        report.errors.extend(_outside(boundary, resource, target))
        if reads.environ is not None and target.encryption is not None:
            missing = digest_key_problem(target.encryption, reads.environ)
            if missing is not None:
                report.errors.append(
                    FieldProblem(
                        "spec.encryption",
                        f"the pods have no digest key for encrypted Secrets: {missing} (the chart's "
                        "secretsDigestKey provides REVERSER_SECRETS_DIGEST_KEY)",
                    )
                )
        provider = providers[target.provider][0]
        try:
            checked = Settings.model_validate(
                {**alone, "providers": [provider.model_dump()], "targets": [target.model_dump()]}
            )
        except ValidationError as exc:
            report.errors.extend(FieldProblem("spec", item["msg"]) for item in exc.errors())
        if report.errors:
            return
        taken = folders.claim(resource, name, checked.destination(target), provider.url, meters[resource.ref])
        if taken is not None:
            report.errors.append(taken)
            return
        accepted.append((resource.ref, target))
        origins[name] = [origin for origin, _ in mine]

    # the order `_Folders` relies on: the home namespace first, then the oldest
    for resource in sorted(
        by_kind[Kind.GIT_TARGET], key=lambda r: (not boundary.is_home(r.ref.namespace), age_order(r))
    ):
        report = reports[resource.ref]
        _isolated(report, meters[resource.ref], partial(accept, resource, report))
    targets = [target for _, target in sorted(accepted, key=lambda pair: pair[0])]
    known = {t.name for t in targets}
    for target_name, refs in rule_objects.items():
        if target_name not in known:
            for ref in refs:
                reports[ref].errors.append(
                    FieldProblem("spec.targetRef.name", f"no valid GitTarget {target_name}")
                )
    for report in reports.values():
        _trim(report, boundary.limits)
    item_problems = [p for p in item_problems if reports[p.ref].accepted]
    return CompiledConfig(
        providers=[p for p, _ in providers.values()],
        targets=targets,
        reports=reports,
        origins=origins,
        item_problems=item_problems,
        steps=sum(meter.spent for meter in meters.values()),
        clusters=changed_clusters,
    )
