"""The Namespaces' labels, for the namespace policies that select by label.

A ClusterProvider's `spec.allowedNamespaces` (`accessFrom`) and a GitTarget's
`spec.allowedSourceNamespaces` may admit namespaces by a label `selector`. The controller lists
the Namespaces (names and labels only are kept) before each compile while any policy declares
one, and every `REFRESH_S` meanwhile, since a relabelled Namespace changes what is admitted
without a change to the policy. Namespaces are not watched: a cluster's namespace objects are
few, and a list every half minute costs less than one more watch per leadership.

On a failed list the last good answer stands (an apiserver blip must not revoke every tenant);
with none yet, the labels are unknown and the policies admit by `names` only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import Counter

from pipeline.customresources.clusterprovider import NamespaceLabels
from pipeline.customresources.objects import CustomResource, Kind
from pipeline.watch.kube import KubeClient, KubeError

__all__ = ["NAMESPACE_LIST_ERRORS", "NamespaceLabelReader", "selects_by_label"]

logger = logging.getLogger(__name__)

_POLICIES = {
    Kind.CLUSTER_PROVIDER: ("allowedNamespaces", "accessFrom"),
    Kind.GIT_TARGET: ("allowedSourceNamespaces",),
}
_PAGE_SIZE = 500

NAMESPACE_LIST_ERRORS = Counter(
    "reverser_config_namespace_list_errors_total",
    "Lists of the Namespaces (for namespace policies with a label selector) that failed",
)


def selects_by_label(objects: Iterable[CustomResource]) -> bool:
    """Whether any namespace policy of `objects` declares a label selector."""
    for resource in objects:
        for field in _POLICIES.get(resource.ref.kind, ()):
            policy = resource.spec.get(field)
            if isinstance(policy, dict) and policy.get("selector") is not None:
                return True
    return False


class NamespaceLabelReader:
    """Lists the Namespaces' labels; keeps the last good answer through an outage."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._good: dict[str, dict[str, str]] | None = None
        #: whether the last compile needed the labels (the controller then refreshes them)
        self.wanted = False

    async def read(self, objects: Iterable[CustomResource]) -> NamespaceLabels:
        self.wanted = selects_by_label(objects)
        if not self.wanted:
            return None
        try:
            found: dict[str, dict[str, str]] = {}
            async for items, _rv in self._client.list_pages("/api/v1/namespaces", [], _PAGE_SIZE):
                for item in items:
                    meta = item.get("metadata") or {}
                    labels = meta.get("labels") or {}
                    found[str(meta.get("name") or "")] = {str(k): str(v) for k, v in labels.items()}
        except KubeError as exc:
            NAMESPACE_LIST_ERRORS.inc()
            logger.warning(
                "cannot list the Namespaces for the namespace policies' label selectors (%s); %s",
                exc,
                "keeping the last good list" if self._good is not None else "selectors admit nothing yet",
            )
            return self._good
        self._good = found
        return found
