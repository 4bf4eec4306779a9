"""Turns targets and their watch rules into the set of watch streams, using API discovery.

Problems are per rule entry (unknown, ambiguous, not followable, Secret data) and never stop the
other entries: each one becomes a `RuleProblem` that logs, metrics and the CLI show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from pipeline.codec.stream_id import StreamId
from pipeline.config import ClusterSettings, TargetSettings, WatchRule
from pipeline.kube.resources import ApiResource
from pipeline.models import GroupResource
from pipeline.sealing import is_sensitive
from pipeline.targetrules import DENYLIST, is_wildcard, wildcard_matches

__all__ = ["RuleProblem", "StreamSpec", "resolve_target"]

_REQUIRED_VERBS = frozenset({"get", "list", "watch"})


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """Everything that identifies one watch stream; a changed field means a different stream."""

    stream: StreamId
    route: str
    kind: str
    namespaced: bool
    label_selector: str

    @property
    def group_resource(self) -> GroupResource:
        return self.stream.group_resource

    @property
    def cursor_key(self) -> str:
        """Key on the compacted cursor topic (`StreamId.cursor_key`)."""
        return self.stream.cursor_key

    def describe(self) -> str:
        stream = self.stream
        return f"{stream.target}:{stream.group_resource.key}@{stream.scope or '(cluster)'}"

    @property
    def identity(self) -> str:
        """What a stream report names it by: every field that makes it a different stream."""
        s = self.stream
        return "|".join((s.target, s.cluster, s.group, s.version, s.resource, s.scope, self.label_selector))

    def api(self) -> ApiResource:
        s = self.stream
        return ApiResource(s.group, s.version, s.resource, self.kind, self.namespaced, frozenset())


@dataclass(frozen=True, slots=True)
class RuleProblem:
    """Why one resource entry of one rule of one target is not watched."""

    target: str
    rule: int
    resource: str
    reason: str
    message: str


class _Entry(NamedTuple):
    """One resource entry of one rule of one target, as its streams and problems name it."""

    target: TargetSettings
    cluster: ClusterSettings
    item: int
    rule: WatchRule
    text: str

    def problem(self, reason: str, message: str) -> RuleProblem:
        return RuleProblem(self.target.name, self.item, self.text, reason, message)


def _lookup(text: str, discovered: Mapping[tuple[str, str], ApiResource]) -> ApiResource | tuple[str, str]:
    """The discovered resource for `resource` or `group/resource`, or (reason, message)."""
    name = text.strip()
    if "/" in name:
        gr = GroupResource.parse(name)
        found = discovered.get((gr.group, gr.resource.lower()))
        if found is None:
            return ("Unknown", f"{name} is not served by the cluster")
        return found
    lowered = name.lower()
    core = discovered.get(("", lowered))
    if core is not None:
        return core
    matches = sorted(api.group for (_, res), api in discovered.items() if res == lowered)
    if not matches:
        return ("Unknown", f"{name} is not served by the cluster")
    if len(matches) > 1:
        return (
            "Ambiguous",
            f"{name} is served by groups {', '.join(matches)}; write it as group/resource",
        )
    return discovered[(matches[0], lowered)]


def _followable(api: ApiResource, encrypted: bool) -> tuple[str, str] | None:
    key = (api.group, api.resource)
    if not encrypted and is_sensitive(api.group, api.resource):
        return (
            "SecretExcluded",
            "Secret data is never written to Git in plaintext; configure the target's encryption",
        )
    if key in DENYLIST:
        return ("NotFollowable", f"{GroupResource(*key).key} is on the watch denylist")
    missing = _REQUIRED_VERBS - api.verbs
    if missing:
        return ("NotWatchable", f"the server does not allow {', '.join(sorted(missing))}")
    return None


def resolve_target(
    target: TargetSettings,
    cluster: ClusterSettings,
    discovered: Mapping[tuple[str, str], ApiResource],
) -> tuple[list[StreamSpec], list[RuleProblem]]:
    """The streams one target needs, and the problems of the rule entries that got none."""
    streams: dict[tuple[str, str, str], StreamSpec] = {}
    problems: list[RuleProblem] = []
    encrypted = target.encryption is not None
    for index, rule in enumerate(target.rules):
        for text in rule.resources:
            if is_wildcard(text):
                matched = _expand(text, rule, discovered, encrypted)
                if not matched:
                    problems.append(
                        RuleProblem(
                            target.name,
                            index,
                            text,
                            "Unknown",
                            f"{text} matches no served resource that can be watched in this rule's scope",
                        )
                    )
                for api, scoped in matched:
                    _add_streams(streams, problems, _Entry(target, cluster, index, rule, text), api, scoped)
                continue
            found = _lookup(text, discovered)
            if isinstance(found, tuple):
                problems.append(RuleProblem(target.name, index, text, *found))
                continue
            refusal = _followable(found, encrypted)
            if refusal is not None:
                problems.append(RuleProblem(target.name, index, text, *refusal))
                continue
            scopes = _scopes(found, rule.namespaces, rule.cluster_wide)
            if isinstance(scopes, tuple):
                problems.append(RuleProblem(target.name, index, text, *scopes))
                continue
            _add_streams(streams, problems, _Entry(target, cluster, index, rule, text), found, scopes)
    return sorted(
        streams.values(), key=lambda s: (s.stream.group, s.stream.resource, s.stream.scope)
    ), problems


def _expand(
    text: str, rule: WatchRule, discovered: Mapping[tuple[str, str], ApiResource], encrypted: bool
) -> list[tuple[ApiResource, list[str]]]:
    """The served types a wildcard entry stands for, with their scopes.

    Types the rule could not watch anyway are left out without a problem each (a `*` is not a
    request for Secrets without encryption, for denylisted or unwatchable types, or for types of
    the other scope); a CRD installed later joins at the next rediscovery.
    """
    found: list[tuple[ApiResource, list[str]]] = []
    for key in sorted(discovered):
        api = discovered[key]
        if not wildcard_matches(text, GroupResource(api.group, api.resource)):
            continue
        if _followable(api, encrypted) is not None:
            continue
        scopes = _scopes(api, rule.namespaces, rule.cluster_wide)
        if not isinstance(scopes, tuple):
            found.append((api, scopes))
    return found


def _add_streams(
    streams: dict[tuple[str, str, str], StreamSpec],
    problems: list[RuleProblem],
    entry: _Entry,
    found: ApiResource,
    scopes: list[str],
) -> None:
    """One stream per scope of `found`, at the first of the rule's `versions` its group serves
    (none: the preferred one); a scope already watched with another selector is a problem."""
    target, cluster, rule = entry.target, entry.cluster, entry.rule
    version = found.version
    if rule.versions:
        served = found.served or (found.version,)
        chosen = next((v for v in rule.versions if v in served), None)
        if chosen is None:
            problems.append(
                entry.problem(
                    "VersionNotServed",
                    f"{found.group or 'core'} serves {', '.join(served)}, none of {', '.join(rule.versions)}",
                )
            )
            return
        version = chosen
    for scope in scopes:
        spec = StreamSpec(
            stream=StreamId(target.name, cluster.name, found.group, version, found.resource, scope),
            route=cluster.route,
            kind=found.kind,
            namespaced=found.namespaced,
            label_selector=rule.label_selector,
        )
        key = (found.group, found.resource, scope)
        earlier = streams.get(key)
        if earlier is None:
            streams[key] = spec
        elif earlier.label_selector != spec.label_selector:
            problems.append(
                entry.problem(
                    "SelectorConflict",
                    f"{scope or 'cluster-wide'} is already watched with selector "
                    f"{earlier.label_selector!r}; one stream per scope",
                )
            )


def _scopes(api: ApiResource, namespaces: Iterable[str], cluster_wide: bool) -> list[str] | tuple[str, str]:
    names = sorted(set(namespaces))
    if not api.namespaced:
        if names:
            return ("ScopeMismatch", f"{api.resource} is cluster-scoped; remove its namespaces")
        return [""]
    if cluster_wide:
        return [""]
    if not names:
        return ("ScopeMismatch", f"{api.resource} is namespaced; list namespaces or set cluster_wide")
    return names
