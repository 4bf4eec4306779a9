"""The tenant boundary: what an object outside the controller's namespace may make the service do.

Teams create GitProviders, GitTargets and WatchRules in their own namespaces, while the service
runs with the pod's environment, files and Secret-reading RBAC, one event loop and one config
topic for everyone. This module is the one place that says what a tenant's object may ask of
those, and `compile_resources` asks it about every object (docs/security.md, Tenants):

- `spec.pipeline` takes only the tuning fields of `TENANT_PIPELINE`, within their bounds; any other
  field (an environment variable name, a file name, an `allow_*` escape hatch, a Secret of some
  namespace) is refused naming it. The home namespace (`custom_resources.namespace`, the
  platform's own) may set every field, as the YAML file may.
- Secret and ConfigMap references resolve in the object's own namespace: the compiler builds them
  so, and `reaches_outside` checks every accepted provider and target once more.
- A GitProvider's URL and a GitTarget's path must lie under a grant of `custom_resources.tenants`
  matching the namespace; a namespace no grant matches gets no provider (deny by default).
- Sizes are capped per rule item, per object and per namespace (`CompileLimits`), and each
  object's compile is metered in steps (`StepMeter`): no object can stall the compiler or grow the
  config record past the topic's limit, and the offender alone gets the error in its status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.authormode import AttributionMode
from pipeline.config import (
    NAMESPACE_PLACEHOLDER,
    EncryptionSettings,
    ProviderSettings,
    SigningFormat,
    SshSettings,
    TargetSettings,
    TenantGrant,
)
from pipeline.customresources.objects import CustomResource, Kind, ObjectRef
from pipeline.customresources.problems import FieldProblem
from pipeline.gitnames import GitNameError, normalize_target_path
from pipeline.globs import glob_match

__all__ = [
    "TENANT_PIPELINE",
    "BudgetExceeded",
    "Choice",
    "CompileLimits",
    "Measure",
    "Number",
    "StepMeter",
    "TenantBoundary",
    "Text",
    "TextList",
    "age_order",
    "measure",
]


@dataclass(frozen=True, slots=True)
class CompileLimits:
    """Caps on what one object, one rule item and one tenant namespace may ask the compiler for.

    Generous for hand-written objects (gitops-reverser's own examples use a few entries); the point
    is that no object, however written, can make the compile slow or the config record too large.
    Per-namespace caps apply outside the home namespace; the oldest objects of a namespace keep
    their share, the newest over it are refused.
    """

    object_spec_bytes: int = 64 * 1024
    """Largest spec of one object, measured as compact JSON."""
    object_depth: int = 32
    """Deepest nesting of mappings and lists in one spec."""
    rule_items: int = 64
    """Most `spec.rules[]` items of one WatchRule or ClusterWatchRule."""
    item_entries: int = 512
    """Most `apiGroups` x `resources` entries of one rule item."""
    object_entries: int = 2048
    """Most entries of all the items of one rule object."""
    allowed_branches: int = 32
    """Most `spec.allowedBranches` of one GitProvider."""
    glob_chars: int = 128
    """Longest `spec.allowedBranches` pattern."""
    branch_chars: int = 255
    """Longest branch name (git refuses longer ref components on most file systems)."""
    namespace_objects: int = 256
    """Most objects of one tenant namespace."""
    namespace_spec_bytes: int = 1024 * 1024
    """Most spec bytes of all the objects of one tenant namespace."""
    namespace_entries: int = 8192
    """Most rule entries of all the rule objects of one tenant namespace."""
    object_steps: int = 2_000_000
    """Most compile steps (leaves walked, entries built, glob character comparisons) per object."""
    reported_errors: int = 20
    """Most errors kept per object in its report (and so in the config record and its status)."""
    reported_unsupported: int = 50
    """Most unsupported fields kept per object in its report."""
    message_chars: int = 1000
    """Longest error message kept."""


class BudgetExceeded(Exception):
    """One object's compile took more steps than `CompileLimits.object_steps`."""


class StepMeter:
    """Counts the steps of one object's compile; raises BudgetExceeded past the limit.

    Steps, not seconds, so the bound is the same on a loaded machine and in a property test; every
    loop of the compiler whose length an object decides spends its iterations here.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0

    def spend(self, steps: int) -> None:
        if self.spent + steps > self.limit:
            self.spent = self.limit
            raise BudgetExceeded(f"compiling it took more than {self.limit} steps")
        self.spent += steps


@dataclass(frozen=True, slots=True)
class Measure:
    """An object's spec as the limits see it: JSON bytes and nesting depth (bytes stop at the cap)."""

    spec_bytes: int
    depth: int


def measure(value: Any, *, byte_cap: int, depth_cap: int) -> Measure:
    """The compact-JSON size and depth of `value`, counted without recursion and stopped past a cap
    (a spec nested ten thousand deep neither recurses nor runs to its end)."""
    size = 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack and size <= byte_cap and deepest <= depth_cap:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            size += 2 + len(node)
            for key, child in node.items():
                size += len(str(key)) + 3
                stack.append((child, depth + 1))
        elif isinstance(node, list):
            size += 2 + len(node)
            stack.extend((child, depth + 1) for child in node)
        elif isinstance(node, str):
            size += len(node.encode("utf-8", "replace")) + 2
        else:
            size += len(str(node))
    return Measure(size, deepest)


@dataclass(frozen=True, slots=True)
class Number:
    """A tenant tuning field that takes a number within [low, high]."""

    low: float
    high: float

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        if not self.low <= value <= self.high:
            return f"must be between {self.low:g} and {self.high:g} outside the controller's namespace"
        return None


@dataclass(frozen=True, slots=True)
class Text:
    """A tenant tuning field that takes a string of at most `max_chars`."""

    max_chars: int

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if len(value) > self.max_chars:
            return f"is longer than {self.max_chars} characters"
        return None


@dataclass(frozen=True, slots=True)
class TextList:
    """A tenant tuning field that takes a list of at most `max_items` strings."""

    max_items: int

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            return "must be a list of strings"
        if len(value) > self.max_items:
            return f"has more than {self.max_items} entries"
        return None


@dataclass(frozen=True, slots=True)
class Choice:
    """A tenant tuning field that takes one of `values` (the spellings of a StrEnum)."""

    values: tuple[str, ...]

    def problem(self, value: Any) -> str | None:
        if value not in self.values:
            return f"must be one of {', '.join(self.values)}"
        return None


Tunable = Number | Text | TextList | Choice

#: Every `spec.pipeline` field an object outside the home namespace may set (dotted paths), and
#: what it takes. Tuning only: nothing here names a variable, a file, a Secret or switches a check off.
TENANT_PIPELINE: Mapping[Kind, Mapping[str, Tunable]] = {
    Kind.GIT_PROVIDER: {
        "push_cooldown_s": Number(0, 3600),
        "push_max_backoff_s": Number(1, 3600),
        "commit_window_max_s": Number(0, 3600),
        "window_max_bytes": Number(1, 8 * 1024 * 1024),
        "credentials_refresh_s": Number(60, 86400),
    },
    Kind.GIT_TARGET: {
        "commit_window_s": Number(0, 3600),
        "commit_message.subject": Text(200),
        "commit_message.body": Text(2000),
        "encryption.age_recipients": TextList(32),
        "encryption.sensitive_resources": TextList(64),
        # who authors the target's commits: it names no identity, the provider's committer is used
        "attribution": Choice(tuple(AttributionMode)),
    },
}

# A URL's `.`/`..` path segments and percent-escapes of `.`, `/`, `\` and `@`: spellings that make
# a URL under a granted prefix reach another repository once git or the server normalizes it.
_DOT_SEGMENT = re.compile(r"(?:^|[/:])\.{1,2}(?:[/?#]|$)")
_ESCAPED = re.compile(r"%(?:2e|2f|5c|40)", re.IGNORECASE)
_DEFAULT_DIGEST_KEY_ENV = EncryptionSettings.model_fields["digest_key_env"].default
_NEVER = datetime.max.replace(tzinfo=UTC)


def age_order(resource: CustomResource) -> tuple[bool, datetime, ObjectRef]:
    """Oldest first: objects with a creation time before those without (offline), then by identity."""
    created = resource.created_at
    return (created is None, created or _NEVER, resource.ref)


def _item_entries(items: list[Any]) -> list[int]:
    """The apiGroups x resources entries each rule item names (what it compiles to)."""
    counts: list[int] = []
    for item in items:
        if not isinstance(item, dict):
            counts.append(0)
            continue
        resources, groups = item.get("resources"), item.get("apiGroups")
        width = len(resources) if isinstance(resources, list) else 1
        counts.append(width * (len(groups) if isinstance(groups, list) and groups else 1))
    return counts


def _under_url(url: str, prefix: str) -> bool:
    """Whether `url` is `prefix` or lies below it, the prefix ending at a `/` or `:` boundary."""
    if not url.startswith(prefix):
        return False
    return len(url) == len(prefix) or prefix.endswith(("/", ":")) or url[len(prefix)] == "/"


def _under_path(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(f"{prefix}/")


@dataclass(frozen=True, slots=True)
class TenantBoundary:
    """The home namespace, the platform's grants and the caps: everything a tenant check needs."""

    home_namespace: str
    grants: tuple[TenantGrant, ...] = ()
    limits: CompileLimits = CompileLimits()
    #: the cluster the objects live in: a grant without `clusters` lets a tenant mirror only it
    home_cluster: str = "default"

    @classmethod
    def of(
        cls,
        home_namespace: str,
        grants: Iterable[TenantGrant],
        limits: CompileLimits | None = None,
        home_cluster: str = "default",
    ) -> TenantBoundary:
        return cls(home_namespace, tuple(grants), limits or CompileLimits(), home_cluster)

    def is_home(self, namespace: str) -> bool:
        """Objects of the home namespace, and ClusterWatchRules (creating one needs cluster rights)."""
        return namespace in (self.home_namespace, "")

    def _grants(self, namespace: str) -> list[TenantGrant]:
        return [g for g in self.grants if any(glob_match(p, namespace) for p in g.namespaces)]

    def pipeline_problems(self, resource: CustomResource, extension: Mapping[str, Any]) -> list[FieldProblem]:
        """Each `spec.pipeline` field a tenant object sets that is not a tuning field within bounds."""
        if self.is_home(resource.ref.namespace):
            return []
        allowed = TENANT_PIPELINE.get(resource.ref.kind, {})
        prefixes = {path.rsplit(".", 1)[0] for path in allowed if "." in path}
        problems: list[FieldProblem] = []
        stack: list[tuple[str, Any]] = [(str(key), value) for key, value in extension.items()]
        while stack:
            path, value = stack.pop()
            where = f"spec.pipeline.{path}"
            tunable = allowed.get(path)
            if tunable is not None:
                why = tunable.problem(value)
                if why is not None:
                    problems.append(FieldProblem(where, why))
            elif path in prefixes and isinstance(value, dict):
                stack.extend((f"{path}.{key}", child) for key, child in value.items())
            else:
                problems.append(FieldProblem(where, self._not_for_tenants(resource.ref.kind)))
        return sorted(problems, key=lambda p: p.path)

    def _not_for_tenants(self, kind: Kind) -> str:
        allowed = ", ".join(TENANT_PIPELINE.get(kind, {})) or "nothing"
        return (
            f"may be set only in the controller's namespace {self.home_namespace!r}; elsewhere "
            f"spec.pipeline takes only {allowed}"
        )

    def url_problems(self, namespace: str, url: Any) -> list[FieldProblem]:
        """Why a tenant GitProvider may not use `url` (none: it may)."""
        if self.is_home(namespace) or not isinstance(url, str):
            return []
        grants = self._grants(namespace)
        if not grants:
            return [FieldProblem("spec.url", self._no_grant(namespace))]
        address = url.split("://", 1)[-1]
        if _DOT_SEGMENT.search(address) or _ESCAPED.search(url) or "\\" in url:
            return [FieldProblem("spec.url", "has '.' or '..' segments or escaped '.', '/', '\\' or '@'")]
        prefixes = [p.replace(NAMESPACE_PLACEHOLDER, namespace) for g in grants for p in g.url_prefixes]
        if any(_under_url(url, prefix) for prefix in prefixes):
            return []
        return [
            FieldProblem(
                "spec.url",
                f"is not under a repository custom_resources.tenants grants namespace {namespace!r} "
                f"({', '.join(prefixes)})",
            )
        ]

    def path_problems(self, namespace: str, path: Any) -> list[FieldProblem]:
        """Why a tenant GitTarget may not write `path` (none: it may, or the path is invalid anyway)."""
        if self.is_home(namespace):
            return []
        grants = self._grants(namespace)
        if not grants:
            return [FieldProblem("spec.path", self._no_grant(namespace))]
        try:
            folder = normalize_target_path(path if isinstance(path, str) else ".")
            prefixes = [
                normalize_target_path(p.replace(NAMESPACE_PLACEHOLDER, namespace))
                for g in grants
                for p in g.path_prefixes
            ]
        except GitNameError:
            return []  # TargetSettings says why the path is invalid
        if any(_under_path(folder, prefix) for prefix in prefixes):
            return []
        shown = ", ".join(p or "." for p in prefixes)
        return [
            FieldProblem(
                "spec.path",
                f"{folder or '.'!r} is not inside a folder custom_resources.tenants grants namespace "
                f"{namespace!r} ({shown})",
            )
        ]

    def cluster_problems(self, namespace: str, cluster: str) -> list[FieldProblem]:
        """Why a tenant GitTarget may not mirror `cluster`: its namespace of another cluster may be
        someone else's, so only the granted clusters (default: the one the objects live in)."""
        if self.is_home(namespace):
            return []
        allowed = {c for g in self._grants(namespace) for c in (g.clusters or [self.home_cluster])}
        if cluster in allowed:
            return []
        return [
            FieldProblem(
                "spec.clusterProviderRef.name",
                f"cluster {cluster!r} is not granted to namespace {namespace!r} by custom_resources.tenants "
                f"({', '.join(sorted(allowed)) or 'none'})",
            )
        ]

    def size_problems(self, resource: CustomResource) -> list[FieldProblem]:
        """Why an object is too large to compile at all (any namespace: the caps are far above a
        hand-written object's needs, and the config record is shared by everyone)."""
        limits = self.limits
        size = measure(resource.spec, byte_cap=limits.object_spec_bytes, depth_cap=limits.object_depth)
        if size.depth > limits.object_depth:
            return [FieldProblem("spec", f"is nested deeper than {limits.object_depth} levels")]
        if size.spec_bytes > limits.object_spec_bytes:
            return [FieldProblem("spec", f"is larger than {limits.object_spec_bytes} bytes")]
        problems: list[FieldProblem] = []
        items = resource.spec.get("rules")
        if resource.ref.kind in (Kind.WATCH_RULE, Kind.CLUSTER_WATCH_RULE) and isinstance(items, list):
            if len(items) > limits.rule_items:
                problems.append(FieldProblem("spec.rules", f"has more than {limits.rule_items} items"))
            for index, count in enumerate(_item_entries(items)):
                if count > limits.item_entries:
                    problems.append(
                        FieldProblem(
                            f"spec.rules[{index}]",
                            f"names {count} apiGroups x resources entries, more than {limits.item_entries}",
                        )
                    )
            total = sum(_item_entries(items))
            if total > limits.object_entries:
                problems.append(
                    FieldProblem(
                        "spec.rules", f"name {total} entries in all, more than {limits.object_entries}"
                    )
                )
        branches = resource.spec.get("allowedBranches")
        if resource.ref.kind is Kind.GIT_PROVIDER and isinstance(branches, list):
            if len(branches) > limits.allowed_branches:
                problems.append(
                    FieldProblem("spec.allowedBranches", f"has more than {limits.allowed_branches} entries")
                )
            for index, pattern in enumerate(branches):
                if isinstance(pattern, str) and len(pattern) > limits.glob_chars:
                    problems.append(
                        FieldProblem(
                            f"spec.allowedBranches[{index}]", f"is longer than {limits.glob_chars} characters"
                        )
                    )
        return problems

    def namespace_problems(self, resources: Iterable[CustomResource]) -> dict[ObjectRef, FieldProblem]:
        """The objects over their tenant namespace's share, each with why; the oldest keep theirs.

        Objects are counted oldest first (creation time, then kind and name), so adding an object
        never takes an existing one out; the home namespace has no share.
        """
        limits = self.limits
        used: dict[str, tuple[int, int, int]] = {}
        over: dict[ObjectRef, FieldProblem] = {}
        for resource in sorted(resources, key=age_order):
            namespace = resource.ref.namespace
            if self.is_home(namespace):
                continue
            spec_bytes = measure(
                resource.spec, byte_cap=limits.namespace_spec_bytes, depth_cap=limits.object_depth
            ).spec_bytes
            items = resource.spec.get("rules")
            entries = sum(_item_entries(items)) if isinstance(items, list) else 0
            count, total_bytes, total_entries = used.get(namespace, (0, 0, 0))
            wanted = (count + 1, total_bytes + spec_bytes, total_entries + entries)
            caps = (limits.namespace_objects, limits.namespace_spec_bytes, limits.namespace_entries)
            measures = ("objects", "spec bytes", "rule entries")
            exceeded = [what for what, value, cap in zip(measures, wanted, caps, strict=True) if value > cap]
            if exceeded:
                share = ", ".join(f"{cap} {what}" for what, cap in zip(measures, caps, strict=True))
                over[resource.ref] = FieldProblem(
                    "metadata.namespace",
                    f"namespace {namespace!r} is over its share ({share}) in {', '.join(exceeded)}; "
                    "older objects keep theirs",
                )
                continue
            used[namespace] = wanted
        return over

    def _no_grant(self, namespace: str) -> str:
        return (
            f"no entry of custom_resources.tenants grants namespace {namespace!r} a repository; "
            f"only objects in the controller's namespace {self.home_namespace!r} are trusted without one"
        )

    def reaches_outside(self, namespace: str, settings: ProviderSettings | TargetSettings) -> list[str]:
        """The fields of accepted settings that reach beyond the object's namespace (none for home).

        The last word on the boundary: whatever the compiler built, a tenant's settings name no
        environment variable but the platform's digest key default, no file, no other namespace's
        Secret or ConfigMap, and switch no check off.
        """
        if self.is_home(namespace):
            return []
        if isinstance(settings, TargetSettings):
            encryption = settings.encryption
            if encryption is None:
                return []
            return [
                name
                for name, reaches in (
                    ("encryption.sops_config", encryption.sops_config is not None),
                    ("encryption.digest_key_env", encryption.digest_key_env != _DEFAULT_DIGEST_KEY_ENV),
                    (
                        "encryption.age_key_secret.namespace",
                        encryption.age_key_secret is not None
                        and encryption.age_key_secret.namespace != namespace,
                    ),
                )
                if reaches
            ]
        found = [
            name
            for name, value in (
                ("username_env", settings.username_env),
                ("password_env", settings.password_env),
                ("allow_plain_http_credentials", settings.allow_plain_http_credentials or None),
            )
            if value is not None
        ]
        if settings.ssh is not None and settings.ssh != SshSettings():
            found.append("ssh")
        for name, ref in (
            ("credentials_secret", settings.credentials_secret),
            ("known_hosts_ref", settings.known_hosts_ref),
        ):
            if ref is not None and ref.namespace != namespace:
                found.append(f"{name}.namespace")
        signing = settings.signing
        if signing is not None:
            secret = signing.key_secret
            own_secret = secret is not None and secret.namespace == namespace
            plain = (
                signing.format == SigningFormat.SSH and signing.gpg_home is None and signing.key_id is None
            )
            if not (own_secret and plain and signing.key_file is None and signing.key_env is None):
                found.append("signing")
        return found
