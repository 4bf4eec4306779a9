"""The versions of each scalable object the router mirrored: where a scale fact's range starts.

A scale's admission fact names the version it makes by the parent's resourceVersion before the
write and the new replica count (pipeline.content.scale). The watch delivers every version of an
object in order on its stream, except those that change nothing mirrored (status writes, which it
drops); the router admits records in log order per partition, so the versions of one object it
admitted, in order, give each event the last mirrored version before it, and the scale that made
the event started from that version or one after it. A re-read (after a transaction was retried)
finds its event's predecessor in the same history. What the memory cannot vouch for it does not
guess: an object's first event after a start gets no previous version, and a partition that
another member advanced while this one did not own it is forgotten when taken back. A snapshot
after a watch gap may hide several writes; its object gets the previous version only when it has
the shape the memory kept (`replica_shape`: everything but the count unchanged), so only scales
can have happened in between (docs/attribution.md, "Scale facts").
"""

from __future__ import annotations

from typing import Final

from pipeline.codec.watch_event import EventType, LiveEvent, SnapshotChunk, WatchRecord
from pipeline.content.scale import SCALED_RESOURCES, replica_shape
from pipeline.models import compare_versions

__all__ = ["HISTORY", "MAX_OBJECTS", "Predecessors"]

#: Objects remembered at once; past it the memory starts over (a few events go without a range).
MAX_OBJECTS: Final = 65_536
#: Versions kept per object: enough for a re-read of the records of a retried transaction.
HISTORY: Final = 8

_ObjectKey = tuple[str, str, str]  # (route, group/resource key, uid)
# One admitted version: its resourceVersion and its shape (`replica_shape`; None without a count).
_Version = tuple[str, bytes | None]


class Predecessors:
    """Per scalable object: the versions admitted, oldest first, and the partition they came on."""

    __slots__ = ("_admitted", "_seen")

    def __init__(self) -> None:
        self._seen: dict[_ObjectKey, tuple[int, tuple[_Version, ...]]] = {}
        # per partition, the highest offset admitted
        self._admitted: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def resume(self, partition: int, committed: int) -> None:
        """The partition restarts at `committed`: past what this memory admitted, another member
        admitted versions it never saw, so its objects are forgotten."""
        admitted = self._admitted.get(partition)
        if admitted is None or committed <= admitted + 1:
            return
        self._seen = {key: seen for key, seen in self._seen.items() if seen[0] != partition}
        self._admitted[partition] = committed - 1

    def _remember(self, key: _ObjectKey, partition: int, history: tuple[_Version, ...]) -> None:
        if len(self._seen) >= MAX_OBJECTS and key not in self._seen:
            self._seen.clear()
        self._seen[key] = (partition, history[-HISTORY:])

    def _admit(self, watch: WatchRecord) -> None:
        if watch.offset > self._admitted.get(watch.partition, -1):
            self._admitted[watch.partition] = watch.offset

    def _place(
        self, key: _ObjectKey, partition: int, version: str, object_json: bytes
    ) -> tuple[_Version, _Version] | None:
        """The admitted version before `version` and `version` itself, once admitted; None when no
        version is kept before it (the object is new here, or `version` is the oldest kept), or it
        is older than the newest kept or does not compare. A newer version is remembered."""
        seen = self._seen.get(key)
        if seen is None:
            self._remember(key, partition, ((version, replica_shape(object_json)),))
            return None
        history = seen[1]
        for at, kept in enumerate(history):
            if kept[0] == version:
                return (history[at - 1], kept) if at else None
        if compare_versions(history[-1][0], version) != -1:
            return None
        placed = (version, replica_shape(object_json))
        self._remember(key, partition, (*history, placed))
        return history[-1], placed

    def live(self, watch: WatchRecord) -> str:
        """The version mirrored before this live event ("" when unknown); remembers the event's.

        A re-read event gets the predecessor it had; an event older than every version kept, or
        one that does not compare, gets none and leaves the memory as it was.
        """
        body = watch.body
        gr = watch.stream.group_resource
        if not isinstance(body, LiveEvent) or (gr.group, gr.resource) not in SCALED_RESOURCES:
            return ""
        self._admit(watch)
        key = (watch.head.route, gr.key, body.uid)
        if body.type == EventType.DELETED or body.deleting or not body.uid:
            self._seen.pop(key, None)
            return ""
        placed = self._place(key, watch.partition, body.resource_version, body.object_json)
        return placed[0][0] if placed else ""

    def snapshot(self, watch: WatchRecord) -> dict[str, str]:
        """Remember the versions a snapshot chunk lists (each the predecessor of the object's next
        live event); returns, by uid, the previous version of each object changed only in its count.

        A chunk after a gap (`since`) shows the newest version of an object that may have been
        written several times unseen. When the version before it in the memory has the same shape,
        every write in between changed at most the count, so a scale fact of that range names it
        (the range is [previous, snapshot version), as for a live event). A baseline chunk (no
        `since`) has no gap before it and gets none; nor does an object of another shape, or one
        the memory does not know.
        """
        body = watch.body
        gr = watch.stream.group_resource
        if not isinstance(body, SnapshotChunk) or (gr.group, gr.resource) not in SCALED_RESOURCES:
            return {}
        self._admit(watch)
        previous: dict[str, str] = {}
        for obj in body.objects:
            if not obj.uid:
                continue
            key = (watch.head.route, gr.key, obj.uid)
            placed = self._place(key, watch.partition, obj.resource_version, obj.object_json)
            if placed is None or not body.since:
                continue
            (before, before_shape), (_, shape) = placed
            if shape is not None and shape == before_shape:
                previous[obj.uid] = before
        return previous
