"""A resource type as API discovery serves it, and the path of its collections.

Values only, apart from the client that fetches them (`pipeline.kube.client`, which re-exports
them), so what resolves a watch rule against discovery (`pipeline.watch.resolve`) imports no HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ApiResource", "collection_path"]


@dataclass(frozen=True, slots=True)
class ApiResource:
    """One top-level resource as discovery serves it, at its group's preferred version."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    verbs: frozenset[str]
    served: tuple[str, ...] = ()
    """Every version the resource's group serves, preferred first (a rule's `versions` picks one)."""

    @property
    def api_prefix(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"


def collection_path(api: ApiResource, namespace: str) -> str:
    """URL path of a collection: one namespace, or all of it when `namespace` is empty."""
    if api.namespaced and namespace:
        return f"{api.api_prefix}/namespaces/{namespace}/{api.resource}"
    return f"{api.api_prefix}/{api.resource}"
