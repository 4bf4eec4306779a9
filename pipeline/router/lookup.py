"""The router's author lookup on the process's fact index (`pipeline.attribution`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from pipeline.attribution import Attribution, FactFollower, FactQuery, Resolver
from pipeline.attribution.late import await_late
from pipeline.authormode import DEFAULT_ATTRIBUTION_MODE, AttributionMode
from pipeline.codec.branch_work import Operation, Outcome, Removal, WorkAuthor
from pipeline.codec.watch_event import EventType, LiveEvent, SnapshotEnd, SnapshotObject, WatchRecord
from pipeline.content.key import content_key
from pipeline.content.scale import spec_replicas_json
from pipeline.router import metrics
from pipeline.router.events import CaughtUp, changed_objects
from pipeline.router.versions import Predecessors


class Needs(StrEnum):
    """Which resolution a watch record waits for before its work can be emitted."""

    AUTHOR = "author"  # a live event: who made the change
    CATCH_UP = "catch_up"  # a snapshot chunk with objects changed while the watch was down
    REMOVALS = "removals"  # a snapshot end: who deleted what it no longer lists
    CONFIGURED = "configured"  # any of those, for a configured-author target: the committer, no wait
    NOTHING = "nothing"


def needs(watch: WatchRecord, mode: AttributionMode = DEFAULT_ATTRIBUTION_MODE) -> Needs:
    """What the router (and a watch-events replay) resolves for `watch` of a target in `mode`."""
    if watch.is_live:
        need = Needs.AUTHOR
    elif changed_objects(watch):
        need = Needs.CATCH_UP
    elif isinstance(watch.body, SnapshotEnd):
        need = Needs.REMOVALS
    else:
        return Needs.NOTHING
    return Needs.CONFIGURED if mode is AttributionMode.CONFIGURED_AUTHOR else need


def query_for(watch: WatchRecord, previous_rv: str = "") -> FactQuery:
    """The join query of a live event; removals (DELETED or Terminating) are not exact-capable.

    The change happened no later than the watch observed it, so the observation time is the event
    time the resolution holds for (see docs/attribution.md, "Waiting"). `previous_rv` is the
    object's previous version the router mirrored, when it knows it (`Predecessors`): with the
    event's spec.replicas it lets a scale's admission fact name the version (the `scale` tier).
    """
    body = watch.body
    if not isinstance(body, LiveEvent):
        raise TypeError(f"only live events are attributed, not {watch.kind}")
    query = _query(watch, body, body.labels, body.type != EventType.DELETED and not body.deleting)
    return _with_range(query, body.object_json, previous_rv) if query.exact_capable else query


def snapshot_query(watch: WatchRecord, obj: SnapshotObject, previous_rv: str = "") -> FactQuery:
    """The join query of a snapshot object: exact-capable (snapshots leave out Terminating objects).

    The object was changed no later than the chunk was observed, which is its event time. Its
    `previous_rv` is the version the router mirrored before the gap, given only when the object was
    changed in nothing but its count since (`Predecessors.snapshot`); the query is marked
    `caught_up`, which the `scale` tier holds to a stricter rule (docs/attribution.md, "Scale facts").
    """
    query = _with_range(_query(watch, obj, {}, True), obj.object_json, previous_rv)
    return query._replace(caught_up=True) if query.previous_rv else query


def _with_range(query: FactQuery, object_json: bytes, previous_rv: str) -> FactQuery:
    """`query` with the scale tier's range and count, when the previous version and a count are known."""
    if previous_rv:
        replicas = spec_replicas_json(object_json)
        if replicas is not None:
            return query._replace(previous_rv=previous_rv, replicas=replicas)
    return query


def _query(
    watch: WatchRecord, obj: LiveEvent | SnapshotObject, labels: Mapping[str, str], exact_capable: bool
) -> FactQuery:
    """A removal has no content to name it by; a write's content key is its payload's (a sealed
    payload's key matches nothing: admission gives sensitive types none, see pipeline.facts.admission)."""
    return FactQuery(
        route=watch.head.route,
        group_resource=watch.stream.group_resource,
        uid=obj.uid,
        resource_version=obj.resource_version,
        namespace=obj.namespace,
        name=obj.name,
        labels=labels,
        exact_capable=exact_capable,
        version=watch.stream.version,
        event_ms=watch.observed_at_ms,
        content_key=content_key(obj.object_json) if exact_capable and obj.object_json else "",
    )


#: Predecessors of unresolved events kept for the late watch (as many as it watches at once).
_UNRESOLVED_SCALES_MAX: Final = 10_000


def _version_of(query: FactQuery) -> tuple[str, str, str, str]:
    return (query.route, query.group_resource.key, query.uid, query.resource_version)


def work_author(result: Attribution) -> WorkAuthor:
    """The author stored in branch work for a resolution (UNRESOLVED names nobody)."""
    if not result.resolved:
        return WorkAuthor(Outcome.UNRESOLVED, tier=result.tier)
    return WorkAuthor(
        Outcome.RESOLVED,
        result.author,
        result.display_name,
        result.email,
        result.tier,
        result.actor_kind,
        result.event_ms,
    )


class IndexLookup:
    """Resolves through the fact index, after the follower has replayed `now - TTL`."""

    def __init__(self, follower: FactFollower, resolver: Resolver) -> None:
        self._follower = follower
        self._resolver = resolver
        self._predecessors = Predecessors()
        # The scale ranges of unresolved events and caught-up objects, which the late watch's query
        # (rebuilt from the record, after the memory moved on) cannot know again.
        self._unresolved_scales: dict[tuple[str, str, str, str], FactQuery] = {}

    async def wait_ready(self) -> None:
        await self._follower.wait_ready()

    def ready(self) -> bool:
        return self._follower.ready()

    async def author_for(self, watch: WatchRecord) -> WorkAuthor:
        # (the router starts these in log order, so the memory sees each object's versions in order)
        query = query_for(watch, self._predecessors.live(watch))
        result = await self._resolver.resolve(query)
        self._keep_range(query, result)
        return work_author(result)

    def _keep_range(self, query: FactQuery, result: Attribution) -> None:
        if query.previous_rv and not result.resolved:
            if len(self._unresolved_scales) >= _UNRESOLVED_SCALES_MAX:
                self._unresolved_scales.clear()
            self._unresolved_scales[_version_of(query)] = query

    def resume_versions(self, partition: int, committed: int) -> None:
        self._predecessors.resume(partition, committed)

    def note_version(self, watch: WatchRecord) -> None:
        if watch.is_live:
            self._predecessors.live(watch)
        else:
            self._predecessors.snapshot(watch)

    async def late_author(self, query: FactQuery, window_s: float) -> WorkAuthor | None:
        """The author a fact filed after the hold names for `query`, once one pins it (None: none in time)."""
        kept = self._unresolved_scales.pop(_version_of(query), None)
        if kept is not None and not query.previous_rv:
            query = query._replace(
                previous_rv=kept.previous_rv, replicas=kept.replicas, caught_up=kept.caught_up
            )
        found = await await_late(self._resolver.index, query, window_s)
        return None if found is None else work_author(found)

    async def catch_up(self, watch: WatchRecord) -> list[CaughtUp]:
        """Attribute the chunk's objects that changed while the watch was down, like live events.

        Each is resolved concurrently with the same tiers, grace, watermark and maximum wait; one
        that no fact names by then is still returned (UNRESOLVED: an unknown author, never the
        committer) and counted.
        """
        changed = changed_objects(watch)
        previous = self._predecessors.snapshot(watch)
        queries = [snapshot_query(watch, o, previous.get(o.uid, "")) for o in changed]
        results = await asyncio.gather(*(self._resolver.resolve(q) for q in queries))
        caught: list[CaughtUp] = []
        for obj, query, result in zip(changed, queries, results, strict=True):
            self._keep_range(query, result)
            metrics.SNAPSHOT_CHANGES.labels("attributed" if result.resolved else "unresolved").inc()
            verb = result.fact.verb if result.fact is not None else ""
            caught.append(CaughtUp(obj, Operation.of_verb(verb), work_author(result)))
        return caught

    async def removals_for(self, watch: WatchRecord) -> list[Removal]:
        """Deletion evidence of a snapshot's scope; after a gap, once audit time reached its end.

        The commit worker deletes what the snapshot no longer lists and the pipeline wrote; this
        names who deleted each such object, exactly as that object's DELETED event would be named.
        """
        if isinstance(watch.body, SnapshotEnd) and watch.body.since:
            found = await self._resolver.deletions(
                watch.head.route, watch.stream.group_resource, watch.stream.scope, watch.observed_at_ms
            )
        else:
            # a baseline (no cursor before it): no gap in which a delete could have been missed,
            # so no hold; whatever evidence the index already has still names its deleter
            found = self._resolver.deletion_evidence(
                watch.head.route, watch.stream.group_resource, watch.stream.scope
            )
        return [Removal(uid, namespace, name, work_author(result)) for uid, namespace, name, result in found]
