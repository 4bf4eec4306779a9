"""Which objects a target's watch rules select, decided from the object alone (no API discovery).

The watch stage turns rules into watch streams with discovery (`pipeline/watch/resolve.py`); the
API server then applies each stream's namespace and label selector. Whatever re-reads watch
history for a target without watching (`reverser replay watch-events`) must make the same choice
per object, and the audit ingress needs the types a cluster's rules name. This module owns those
rules:

- a rule entry `group/resource` names exactly that type; a bare `resource` names that resource in
  any group (discovery places `deployments` in `apps`); a pattern names every type it matches: `*`
  every resource of every group, `group/*` every resource of one group (`/*` the core group),
  `*/resource` that resource in every group;
- types on `DENYLIST` are never mirrored, and Secrets only for a target with encryption;
- a namespaced object needs a rule listing its namespace or `cluster_wide`; a cluster-scoped
  object (no namespace) needs a rule without namespaces;
- a rule's `label_selector` (Kubernetes syntax) must match the object's labels;
- a rule's `operations` say which changes of its types reach Git (rules naming a type are an OR).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.config import TargetSettings, WatchRule
from pipeline.kube.selector import LabelSelector, parse_selector
from pipeline.models import GroupResource
from pipeline.operation import Operation
from pipeline.sealing import is_sensitive

__all__ = [
    "ALL_OPERATIONS",
    "DENYLIST",
    "WILDCARD",
    "TargetRules",
    "entry_names",
    "is_wildcard",
    "wildcard_matches",
]

# Types never mirrored: high churn, controller-owned or security-sensitive (docs/watch.md, "Secrets").
DENYLIST = frozenset(
    {
        ("", "pods"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
        ("coordination.k8s.io", "leases"),
        ("apps", "controllerrevisions"),
        ("flowcontrol.apiserver.k8s.io", "flowschemas"),
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    }
)


WILDCARD = "*"


def is_wildcard(text: str) -> bool:
    """Whether a rule's resource entry is a pattern (`*`, `group/*`, `*/resource`, `/*`)."""
    return WILDCARD in text


def wildcard_matches(text: str, gr: GroupResource) -> bool:
    """Whether `gr` matches a wildcard entry: `*` every resource of every group, `group/*` every
    resource of one group (`/*`: the core group), `*/resource` one resource in every group."""
    group, slash, resource = text.strip().rpartition("/")
    if not slash:
        group = WILDCARD
    return group in (WILDCARD, gr.group) and resource in (WILDCARD, gr.resource)


def entry_names(entry: str) -> tuple[str | None, str]:
    """A rule entry as (group, resource); group None for a bare resource (any group)."""
    text = entry.strip()
    if "/" in text:
        gr = GroupResource.parse(text)
        return gr.group, gr.resource.lower()
    return None, text.lower()


#: Every change a rule may let reach Git; a rule without `operations` lets all of them.
ALL_OPERATIONS: frozenset[str] = frozenset(Operation)


@dataclass(frozen=True, slots=True)
class _Rule:
    types: tuple[tuple[str | None, str], ...]
    namespaces: frozenset[str]
    cluster_wide: bool
    selector: LabelSelector
    operations: frozenset[str] = ALL_OPERATIONS

    @classmethod
    def of(cls, rule: WatchRule) -> _Rule:
        return cls(
            tuple(entry_names(entry) for entry in rule.resources),
            frozenset(rule.namespaces),
            rule.cluster_wide,
            parse_selector(rule.label_selector),
            frozenset(rule.operations) or ALL_OPERATIONS,
        )

    def names(self, gr: GroupResource) -> bool:
        resource = gr.resource.lower()
        return any(
            r in (resource, WILDCARD) and (g is None or g in (gr.group, WILDCARD)) for g, r in self.types
        )

    def covers(self, namespace: str) -> bool:
        if namespace:
            return self.cluster_wide or namespace in self.namespaces
        return not self.namespaces


@dataclass(frozen=True, slots=True)
class TargetRules:
    """A target's rules as a decision per object; `selects` is what a watch of the target would see."""

    target: str
    rules: tuple[_Rule, ...]
    encrypted: bool

    @classmethod
    def of(cls, target: TargetSettings) -> TargetRules:
        """Raises `SelectorError` for a label selector that does not parse (config validation
        accepts any text there; the watch stage would get the same refusal from the API server)."""
        return cls(target.name, tuple(_Rule.of(rule) for rule in target.rules), target.encryption is not None)

    def mirrors(self, gr: GroupResource) -> bool:
        """Whether the type may be mirrored at all for this target (denylist, Secrets)."""
        if (gr.group, gr.resource) in DENYLIST:
            return False
        return self.encrypted or not is_sensitive(gr.group, gr.resource)

    def covers(self, gr: GroupResource, scope: str) -> bool:
        """Whether some rule watches `gr` in `scope` (a namespace, or "" for cluster-wide / cluster-scoped).

        A cluster-wide scope is covered by any rule naming the type: the target sees part of it
        (its namespaces), and the objects are then filtered one by one with `selects`.
        """
        if not self.mirrors(gr):
            return False
        return any(rule.names(gr) and (not scope or rule.covers(scope)) for rule in self.rules)

    def operations(self, gr: GroupResource, scope: str) -> frozenset[str]:
        """The changes of `gr` in `scope` (a namespace, or "") that may reach Git: those of every
        rule naming it there (rules are an OR); all of them when no rule does (work of an older
        configuration is not filtered by a newer one's rules)."""
        found = [
            rule.operations for rule in self.rules if rule.names(gr) and (not scope or rule.covers(scope))
        ]
        return frozenset().union(*found) if found else ALL_OPERATIONS

    def selects(self, gr: GroupResource, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the object `namespace/...` of type `gr` with `labels` is one this target mirrors."""
        if not self.mirrors(gr):
            return False
        return any(
            rule.names(gr) and rule.covers(namespace) and rule.selector.matches(labels) for rule in self.rules
        )
