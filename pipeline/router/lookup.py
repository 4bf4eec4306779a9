"""The router's author lookup on the process's fact index (`pipeline.attribution`)."""

from __future__ import annotations

from pipeline.attribution import FactFollower, FactQuery, Resolver
from pipeline.router.events import WatchRecord
from pipeline.work import WorkAuthor


def query_for(watch: WatchRecord) -> FactQuery:
    """The join query of a live event; removals (DELETED or Terminating) are not exact-capable.

    The change happened no later than the watch observed it, so the observation time is the event
    time the resolution holds for (see docs/attribution.md, "Waiting").
    """
    body = watch.body
    return FactQuery(
        route=watch.route,
        group_resource=watch.group_resource,
        uid=body["uid"],
        resource_version=body["resourceVersion"],
        namespace=body["namespace"],
        name=body["name"],
        labels=body["labels"],
        exact_capable=body["type"] != "DELETED" and not body["deleting"],
        version=watch.version,
        event_ms=watch.observed_at_ms,
    )


class IndexLookup:
    """Resolves through the fact index, after the follower has replayed `now - TTL`."""

    def __init__(self, follower: FactFollower, resolver: Resolver) -> None:
        self._follower = follower
        self._resolver = resolver

    async def wait_ready(self) -> None:
        await self._follower.wait_ready()

    def ready(self) -> bool:
        return self._follower.ready()

    async def author_for(self, watch: WatchRecord) -> WorkAuthor:
        result = await self._resolver.resolve(query_for(watch))
        if not result.resolved:
            return WorkAuthor("UNRESOLVED", tier=result.tier)
        return WorkAuthor(
            "RESOLVED",
            result.author,
            result.display_name,
            result.email,
            result.tier,
            result.actor_kind,
            result.event_ms,
        )
