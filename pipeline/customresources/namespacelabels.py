"""The Namespaces' labels, for the namespace policies that select by label.

A ClusterProvider's `spec.allowedNamespaces` (`accessFrom`) and a GitTarget's
`spec.allowedSourceNamespaces` may admit namespaces by a label `selector`. The controller lists
the Namespaces (names and labels only are kept) before a compile that objects changed while any
policy declares one, and every `REFRESH_S` meanwhile, since a relabelled Namespace changes what
is admitted without a change to the policy. A compile woken only by commit results (every push
sends them) reuses the last list. Namespaces are not watched: a cluster's namespace objects are
few, and a list every half minute costs less than one more watch per leadership.

On a failed list the last good answer stands (an apiserver blip must not revoke every tenant);
with none yet, the labels are unknown and the policies admit by `names` only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import Counter

from pipeline.customresources.clusterprovider import NamespaceLabels, selects_by_label
from pipeline.customresources.objects import CustomResource
from pipeline.kube.client import KubeClient, KubeError

__all__ = ["NAMESPACE_LIST_ERRORS", "NamespaceLabelReader"]

logger = logging.getLogger(__name__)

_PAGE_SIZE = 500

NAMESPACE_LIST_ERRORS = Counter(
    "reverser_config_namespace_list_errors_total",
    "Lists of the Namespaces (for namespace policies with a label selector) that failed",
)


class NamespaceLabelReader:
    """Lists the Namespaces' labels; keeps the last good answer through an outage."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._good: dict[str, dict[str, str]] | None = None
        #: whether the last compile needed the labels (the controller then refreshes them)
        self.wanted = False

    async def read(self, objects: Iterable[CustomResource], *, relist: bool = True) -> NamespaceLabels:
        """The labels `objects`' policies need (None: none needed, or none read yet); `relist`
        False reuses the last good list when there is one."""
        self.wanted = selects_by_label(objects)
        if not self.wanted:
            return None
        if not relist and self._good is not None:
            return self._good
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
