"""ClusterProviders: which namespaces may mirror a cluster, and who may choose a rule's source.

gitops-reverser's ClusterProvider is a cluster-scoped object (only a platform admin creates one)
named like the cluster it stands for; a GitTarget's `spec.clusterProviderRef.name` names it. Two
of its fields are authorization, and both are decided here, purely, while compiling:

- `spec.allowedNamespaces` (later releases: `accessFrom`), deny by default: a GitTarget may use the
  cluster only from a namespace listed in `names` (or matched by `selector`). A declared but empty
  policy admits nothing.
- `spec.allowSourceNamespaceOverride` (also spelled `allowWatchRuleSourceNamespaceOverride`,
  later `allowAnySourceNamespace`), default false: whether the owners of the GitTargets it admits
  may point a WatchRule item at a namespace other than the rule's own. What they may then choose
  is the GitTarget's `spec.allowedSourceNamespaces` (`names`, `selector`).

GR's source-namespace rule, in its order: (1) a rule watching its own namespace, against a target
that declares no `allowedSourceNamespaces`, needs nothing; (2) any other namespace needs the
target's ClusterProvider to exist, to admit the target's namespace, and to delegate; (3) a declared
`allowedSourceNamespaces` is exhaustive, even for the rule's own namespace, and an override
against a target that declares none is refused.

How it meets this project's tenant boundary (docs/security.md, Tenants), which still applies in
full: a namespace outside the controller's needs a grant of `custom_resources.tenants` before it
gets a provider or a target at all. On top of that, a tenant's override may never name the
controller's own namespace (where the pipeline's credentials live) nor `*` (every namespace,
other tenants' included): both stay the platform's, written by a WatchRule in the controller's
namespace. The platform's own objects keep their freedom, except that a declared
`allowedSourceNamespaces` binds them too. A cluster for which no ClusterProvider exists keeps the
behaviour of the file's `clusters` (this project's stand-in for them).

A policy's label `selector` is matched against the Namespace objects' labels, which the
controller lists before each compile (`NamespaceLabels`). Where they could not be read (no RBAC,
the apiserver unreachable, offline `config check`), or the namespace does not exist, a policy
admits only by `names`: deny by default, with a message that says which.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from pipeline.customresources.objects import CustomResource, Kind
from pipeline.customresources.problems import FieldProblem
from pipeline.customresources.selectors import selector_text
from pipeline.kube.selector import LabelSelector, parse_selector

__all__ = [
    "FORBIDDEN",
    "OVERRIDE_FIELDS",
    "ClusterProviders",
    "NamespaceLabels",
    "NamespaceMatcher",
    "SourceRefusal",
    "cluster_of",
    "selects_by_label",
]

#: The delegation flag in each spelling gitops-reverser has used.
OVERRIDE_FIELDS = (
    "allowSourceNamespaceOverride",
    "allowWatchRuleSourceNamespaceOverride",
    "allowAnySourceNamespace",
)
_ACCESS_FIELDS = ("allowedNamespaces", "accessFrom")
#: A GitTarget's policy of the namespaces its WatchRule items may watch.
_SOURCE_FIELD = "allowedSourceNamespaces"
#: The item problem reason of a refused source namespace (status `rules[].problems`).
FORBIDDEN = "SourceNamespaceForbidden"

#: Every Namespace's labels by name, as the controller listed them; None: not read.
NamespaceLabels: TypeAlias = Mapping[str, Mapping[str, str]] | None


@dataclass(frozen=True, slots=True)
class NamespaceMatcher:
    """GR's deny-by-default namespace policy: exact `names`, or a label `selector`, ORed."""

    names: frozenset[str]
    #: the parsed `selector`; None when absent or invalid (an invalid one is a problem and admits nothing)
    selector: LabelSelector | None = None
    has_selector: bool = False

    @classmethod
    def read(cls, value: Any, where: str, problems: list[FieldProblem]) -> NamespaceMatcher | None:
        """The matcher of a declared field (None: not declared); a bad shape is a problem of `where`."""
        if value is None:
            return None
        if not isinstance(value, dict):
            problems.append(FieldProblem(where, "must be a mapping with names and/or selector"))
            return cls(frozenset())
        names = value.get("names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            problems.append(FieldProblem(f"{where}.names", "must be a list of namespace names"))
            names = []
        raw = value.get("selector")
        selector: LabelSelector | None = None
        if raw is not None:
            try:
                text = selector_text(raw)
                # an empty selector ({}) selects every namespace, as in Kubernetes
                selector = parse_selector(text)
            except ValueError as exc:
                problems.append(FieldProblem(f"{where}.selector", str(exc)))
        return cls(frozenset(names), selector, raw is not None)

    def admits(self, namespace: str, labels: NamespaceLabels) -> bool:
        if namespace in self.names:
            return True
        if self.selector is None or labels is None or namespace not in labels:
            return False
        return self.selector.matches(labels[namespace])

    def why_not(self, namespace: str, field: str, labels: NamespaceLabels) -> str:
        listed = f"{namespace!r} is not in {field}.names"
        if not self.has_selector:
            return listed
        if self.selector is None:
            return f"{listed}, and {field}.selector is invalid"
        if labels is None:
            return (
                f"{listed}, and the Namespace labels {field}.selector needs could not be read (the "
                "controller lists Namespaces; offline checks cannot): list the namespace under "
                f"{field}.names, or grant the controller list on namespaces"
            )
        if namespace not in labels:
            return f"{listed}, and no Namespace {namespace!r} exists for {field}.selector to match"
        shown = self.selector.text or "everything"
        return f"{listed}, and its labels do not match {field}.selector ({shown})"


@dataclass(frozen=True, slots=True)
class _Provider:
    name: str
    access: NamespaceMatcher | None
    delegates: bool


@dataclass(frozen=True, slots=True)
class SourceRefusal:
    """Why a rule item gets no stream for its source namespace."""

    reason: str
    message: str


def selects_by_label(objects: Iterable[CustomResource]) -> bool:
    """Whether any namespace policy of `objects` declares a label selector (its labels are needed)."""
    fields = {Kind.CLUSTER_PROVIDER: _ACCESS_FIELDS, Kind.GIT_TARGET: (_SOURCE_FIELD,)}
    for resource in objects:
        for field in fields.get(resource.ref.kind, ()):
            policy = resource.spec.get(field)
            if isinstance(policy, dict) and policy.get("selector") is not None:
                return True
    return False


def cluster_of(target: CustomResource) -> str:
    """The ClusterProvider (cluster) a GitTarget names; `default` when omitted, as in gitops-reverser."""
    ref = target.spec.get("clusterProviderRef")
    name = ref.get("name") if isinstance(ref, dict) else None
    return str(name) if name else "default"


class ClusterProviders:
    """The ClusterProviders of one compile, and the decisions that need them."""

    def __init__(
        self,
        providers: Iterable[CustomResource],
        home_namespace: str,
        namespace_labels: NamespaceLabels = None,
    ) -> None:
        self.home_namespace = home_namespace
        self.namespace_labels = namespace_labels
        self.problems: dict[str, list[FieldProblem]] = {}
        self._by_name: dict[str, _Provider] = {}
        for resource in providers:
            if resource.ref.kind is not Kind.CLUSTER_PROVIDER:
                continue
            problems = self.problems.setdefault(resource.ref.name, [])
            spec = resource.spec
            field = next((f for f in _ACCESS_FIELDS if f in spec), _ACCESS_FIELDS[0])
            access = NamespaceMatcher.read(spec.get(field), f"spec.{field}", problems)
            flags = [f for f in OVERRIDE_FIELDS if f in spec]
            delegates = False
            for flag in flags:
                if not isinstance(spec[flag], bool):
                    problems.append(FieldProblem(f"spec.{flag}", "must be true or false"))
                else:
                    delegates = delegates or spec[flag]
            self._by_name[resource.ref.name] = _Provider(resource.ref.name, access, delegates)

    def target_problems(self, namespace: str, cluster: str) -> list[FieldProblem]:
        """Whether a GitTarget in `namespace` may use `cluster` (deny by default once a
        ClusterProvider of that name exists; none: the file's clusters decide, as before)."""
        provider = self._by_name.get(cluster)
        if provider is None:
            return []
        if provider.access is None:
            why = "declares no spec.allowedNamespaces, so no namespace may use it"
        elif provider.access.admits(namespace, self.namespace_labels):
            return []
        else:
            why = provider.access.why_not(namespace, "spec.allowedNamespaces", self.namespace_labels)
        return [FieldProblem("spec.clusterProviderRef.name", f"ClusterProvider {cluster}: {why}")]

    def source_refusal(
        self, rule_namespace: str, source: str, target: CustomResource | None
    ) -> SourceRefusal | None:
        """GR's source-namespace rule for one WatchRule item (module docstring), or None: allowed."""
        problems: list[FieldProblem] = []
        spec = target.spec if target is not None else {}
        policy = NamespaceMatcher.read(spec.get(_SOURCE_FIELD), "", problems)
        where = (
            f"GitTarget {target.ref.namespace}/{target.ref.name}" if target is not None else "the GitTarget"
        )
        home = rule_namespace == self.home_namespace
        override = source != rule_namespace
        if home:
            if policy is None or policy.admits(source, self.namespace_labels):
                return None
            why = policy.why_not(source, "spec.allowedSourceNamespaces", self.namespace_labels)
            return SourceRefusal(FORBIDDEN, f"{where}: {why}")
        if not override and policy is None:
            return None
        if override:
            refusal = self._override_refusal(rule_namespace, source, target)
            if refusal is not None:
                return refusal
        if policy is None:
            return SourceRefusal(
                FORBIDDEN,
                f"{where} declares no spec.allowedSourceNamespaces, so no namespace other than the "
                f"rule's own may be mirrored into it; add {source!r} to that policy",
            )
        if policy.admits(source, self.namespace_labels):
            return None
        if not override:
            return SourceRefusal(
                FORBIDDEN,
                f"{where} declares spec.allowedSourceNamespaces, which is exhaustive: add the rule's own "
                f"namespace {source!r} to keep watching it",
            )
        why = policy.why_not(source, "spec.allowedSourceNamespaces", self.namespace_labels)
        return SourceRefusal(FORBIDDEN, f"{where}: {why}")

    def _override_refusal(
        self, rule_namespace: str, source: str, target: CustomResource | None
    ) -> SourceRefusal | None:
        if source == "*":
            return SourceRefusal(
                FORBIDDEN,
                f"every namespace ('*') includes other tenants' and the controller's; only a WatchRule in "
                f"{self.home_namespace!r} may watch it",
            )
        if source == self.home_namespace:
            return SourceRefusal(
                FORBIDDEN, f"the controller's namespace {source!r} is never a tenant's source namespace"
            )
        cluster = cluster_of(target) if target is not None else "default"
        provider = self._by_name.get(cluster)
        if provider is None:
            return SourceRefusal(
                FORBIDDEN,
                f"no ClusterProvider {cluster!r} delegates the choice: a WatchRule may watch a namespace "
                f"other than its own ({rule_namespace!r}) only through one that sets "
                "spec.allowSourceNamespaceOverride",
            )
        target_namespace = target.ref.namespace if target is not None else rule_namespace
        admitted = self.target_problems(target_namespace, cluster)
        if admitted:
            return SourceRefusal(FORBIDDEN, admitted[0].message)
        if not provider.delegates:
            return SourceRefusal(
                FORBIDDEN,
                f"ClusterProvider {cluster!r} does not set spec.allowSourceNamespaceOverride; a WatchRule "
                f"may watch only its own namespace {rule_namespace!r}",
            )
        return None
