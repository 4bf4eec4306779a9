"""Which group/resources an audit route's facts can be for: the types its cluster's targets watch.

A fact for any other type could never be joined with a watch event, so the ingress drops and
counts it (`unwatched_type`) instead of letting a poster fill the fact index with it. What a rule
entry names is `pipeline.targetrules`' rule (a bare `resource` names it in any group; a pattern such
as `*`, `group/*` or `*/resource` every type it matches).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config import Settings
from pipeline.models import COMMIT_REQUESTS, GroupResource
from pipeline.targetrules import entry_names, is_wildcard, wildcard_matches

__all__ = ["WatchedTypes", "watched_types"]


@dataclass(slots=True)
class WatchedTypes:
    """The types one route's cluster watches."""

    exact: set[GroupResource] = field(default_factory=set)
    any_group: set[str] = field(default_factory=set)
    patterns: set[str] = field(default_factory=set)

    def covers(self, gr: GroupResource) -> bool:
        return (
            gr in self.exact
            or gr.resource in self.any_group
            or any(wildcard_matches(p, gr) for p in self.patterns)
        )


def watched_types(settings: Settings) -> dict[str, WatchedTypes]:
    """Per audit route, what its clusters watch.

    A route no configured cluster uses, or whose clusters have no rules yet, is not listed: the
    ingress then keeps every fact, as there is nothing to check them against. With custom resources,
    the route of their cluster also keeps the facts of CommitRequests (their submitters).
    """
    routes: dict[str, WatchedTypes] = {}
    for cluster in settings.clusters:
        watched = routes.setdefault(cluster.route, WatchedTypes())
        for target in settings.targets:
            if target.cluster != cluster.name:
                continue
            for rule in target.rules:
                for text in rule.resources:
                    if is_wildcard(text):
                        watched.patterns.add(text)
                        continue
                    group, resource = entry_names(text)
                    if group is None:
                        watched.any_group.add(resource)
                    else:
                        watched.exact.add(GroupResource(group, resource))
    listed = {
        route: watched
        for route, watched in routes.items()
        if watched.exact or watched.any_group or watched.patterns
    }
    if settings.custom_resources.enabled and settings.clusters and settings.resources_cluster.route in listed:
        listed[settings.resources_cluster.route].exact.add(COMMIT_REQUESTS)
    return listed
