"""Resolving one watch event to an author: register, look up, wait out the grace, settle.

A removal is answered only by deletion evidence (see `FactIndex.lookup`): while the delete's own
fact has not arrived it waits, like any unmatched event, for the grace and then for the route's
audit watermark (up to the maximum wait), and otherwise resolves to nobody, because the watch event
usually beats the audit batch that carries the delete, and naming the object's last editor instead
is worse than naming nobody.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

from pipeline.attribution import metrics
from pipeline.attribution.index import FactIndex
from pipeline.attribution.model import ABSENT_ATTRIBUTION, Attribution, FactQuery, Tier, is_removal_verb
from pipeline.attribution.watermark import hold_s
from pipeline.content.key import content_key
from pipeline.content.sanitize import metadata_terminating, sanitize, sanitized_json
from pipeline.models import GroupResource

__all__ = ["MISROUTE_STREAK", "Resolver", "query_from_watch_object"]

logger = logging.getLogger(__name__)

MISROUTE_STREAK: Final = 5
_SETTLING_TIERS: Final = frozenset(
    {Tier.DELETE_STICKY, Tier.DELETECOLLECTION_BODY_UID, Tier.DELETECOLLECTION_SCOPE}
)


def _awaits_better(query: FactQuery, found: Attribution) -> bool:
    """A removal matched only to a conflicting exact slot keeps waiting for deletion evidence; a
    caught-up object's scale answer holds for the whole wait, so a later fact can still refuse it."""
    if query.caught_up and found.tier == Tier.SCALE:
        return True
    if query.exact_capable or found.tier in _SETTLING_TIERS:
        return False
    if found.fact is None:
        return found.tier == Tier.CONFLICT
    return not is_removal_verb(found.fact.verb)


class _RouteHealth:
    __slots__ = ("resolved_ever", "streak", "warned")

    def __init__(self) -> None:
        self.resolved_ever = False
        self.streak = 0
        self.warned = False


class Resolver:
    """Attributes watch events against a FactIndex; many resolutions may wait concurrently.

    `grace_ms` is how long a resolution waits for a better fact in any case (0 = one lookup);
    `max_wait_ms` how long it may be held beyond that while the route's audit watermark has not
    passed the event's time by `reorder_ms` (see `pipeline.attribution.watermark`); 0 means no hold
    past the grace. The grace has no default here: `attribution.grace_ms` in the configuration owns it.
    """

    def __init__(self, index: FactIndex, grace_ms: int, max_wait_ms: int = 0, reorder_ms: int = 0) -> None:
        if grace_ms < 0:
            raise ValueError("grace_ms must be >= 0")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if reorder_ms < 0:
            raise ValueError("reorder_ms must be >= 0")
        self.index = index
        self.grace_s = grace_ms / 1000
        self.max_wait_s = max_wait_ms / 1000
        self.reorder_ms = reorder_ms
        self._routes: dict[str, _RouteHealth] = {}

    async def resolve(self, query: FactQuery) -> Attribution:
        """The best attribution available within the grace window; records the resolution metrics."""
        started = time.perf_counter()
        result = await self._await(query)
        self._record(query, result, time.perf_counter() - started)
        return result

    def _hold_s(self, waited_s: float, query: FactQuery) -> float:
        return hold_s(
            waited_s,
            self.grace_s,
            self.max_wait_s,
            query.event_ms,
            self.index.watermark(query.route),
            self.reorder_ms,
        )

    async def _await(self, query: FactQuery) -> Attribution:
        index = self.index
        waiter = index.register(query)
        try:
            fallback = ABSENT_ATTRIBUTION
            found = index.lookup(query)
            if found.decided:
                if not _awaits_better(query, found):
                    return found
                fallback = found
            loop = asyncio.get_running_loop()
            started = loop.time()
            event = waiter.event
            while True:
                remaining = self._hold_s(loop.time() - started, query)
                if remaining <= 0:
                    behind = query.event_ms + self.reorder_ms > index.watermark(query.route)
                    if behind and self.max_wait_s > 0:
                        # Settled at the maximum wait with audit time still behind the event.
                        metrics.HOLDS_EXPIRED.labels(query.route).inc()
                    return fallback
                try:
                    async with asyncio.timeout(remaining):
                        await event.wait()
                except TimeoutError:
                    continue
                # Clear before the re-lookup so a fact filed during it wakes us again.
                event.clear()
                found = index.lookup(query)
                if not found.decided:
                    continue
                if not _awaits_better(query, found):
                    return found
                fallback = found
        finally:
            index.unregister(waiter)

    async def deletions(
        self, route: str, gr: GroupResource, namespace: str, event_ms: int
    ) -> list[tuple[str, str, str, Attribution]]:
        """Deletion evidence for the objects of a scope, once audit time has reached `event_ms`.

        For a snapshot that shows deleted objects only as absences: it waits like any unmatched
        resolution (the grace, then while the route's watermark is behind `event_ms`, up to the
        maximum wait), so a delete made before the snapshot has had its fact filed; then it answers
        `(uid, namespace, name, attribution)` for every object the scope holds deletion evidence
        for, each resolved exactly as that object's DELETED event would be.
        """
        index = self.index
        held = FactQuery(route, gr, "", "", namespace, "", {}, True, event_ms=event_ms)
        waiter = index.register(held)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            while (remaining := self._hold_s(loop.time() - started, held)) > 0:
                waiter.event.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await waiter.event.wait()
                except TimeoutError:
                    continue
        finally:
            index.unregister(waiter)
        if event_ms > index.watermark(route) and self.max_wait_s > 0:
            metrics.HOLDS_EXPIRED.labels(route).inc()
        return self.deletion_evidence(route, gr, namespace)

    def deletion_evidence(
        self, route: str, gr: GroupResource, namespace: str
    ) -> list[tuple[str, str, str, Attribution]]:
        """What `deletions` answers, from the index as it is now (no wait)."""
        index = self.index
        answers = []
        for uid, ns, name in index.deletion_candidates(route, gr, namespace):
            found = index.lookup(FactQuery(route, gr, uid, "", ns, name, {}, False))
            if found.decided:
                answers.append((uid, ns, name, found))
        return answers

    def _record(self, query: FactQuery, result: Attribution, waited_s: float) -> None:
        gr = query.group_resource
        kind = result.actor_kind
        metrics.RESOLUTIONS.labels(result.tier, kind, gr.group, query.version, gr.resource).inc()
        metrics.WAIT_SECONDS.labels(
            result.tier, "write" if query.exact_capable else "removal", gr.group, query.version, gr.resource
        ).observe(waited_s)
        if result.tier != Tier.ABSENT:
            metrics.MATCHED.inc()
        health = self._routes.get(query.route)
        if health is None:
            health = self._routes[query.route] = _RouteHealth()
        if result.resolved:
            # A route that resolved once is never suspected again, so its streak is not read again.
            health.resolved_ever = True
            return
        health.streak += 1
        if health.streak >= MISROUTE_STREAK and not health.resolved_ever and not health.warned:
            health.warned = True
            logger.warning(
                "attribution: %d events on audit route %r resolved to no author and no fact has ever "
                "matched on this route; check that the apiserver posts to /audit-webhook/%s or set the "
                "cluster's audit_route (spec.attribution.auditRoute) to the route it posts to; a cluster "
                "that cannot deliver audit events (EKS, GKE, AKS) wants attribution: configured-author",
                health.streak,
                query.route,
                query.route,
            )

    def misroute_warned(self, route: str) -> bool:
        health = self._routes.get(route)
        return health is not None and health.warned


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def query_from_watch_object(
    route: str,
    gr: GroupResource,
    event_type: str,
    obj: Mapping[str, Any],
    version: str = "",
) -> FactQuery | None:
    """The query for one watch event (ADDED/MODIFIED/DELETED); None for BOOKMARK, ERROR and others.

    The event is exact-capable (its RV is the one its own write produced) unless it is DELETED or
    the object carries `deletionTimestamp`.
    """
    if event_type not in ("ADDED", "MODIFIED", "DELETED"):
        return None
    metadata = _mapping(obj.get("metadata"))
    raw_labels = _mapping(metadata.get("labels"))
    labels = {str(k): str(v) for k, v in raw_labels.items() if v is not None}
    exact_capable = event_type != "DELETED" and not metadata_terminating(metadata)
    return FactQuery(
        route=route,
        group_resource=gr,
        uid=str(metadata.get("uid") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        labels=labels,
        exact_capable=exact_capable,
        version=version,
        # named as the watch would write it, so an admission fact answers offline as it does live
        content_key=content_key(sanitized_json(sanitize(dict(obj)))) if exact_capable else "",
    )
