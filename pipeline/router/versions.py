"""The version of each scalable object the router mirrored last: where a scale fact's range starts.

A scale's admission fact names the version it makes by the parent's resourceVersion before the
write and the new replica count (pipeline.content.scale). The watch delivers every version of an
object in order on its stream, except those that change nothing mirrored (status writes, which it
drops); the router admits records in log order per partition, so the previous event of the same
object, remembered as records are admitted, is the last mirrored version before the event, and
the scale that made the event started from it or from a version after it. What the memory cannot
vouch for it does not guess: the first event of an object after a start, after a gap (a
snapshot's changed objects) or after partitions moved gets no previous version, so no scale fact
can name it (docs/attribution.md, "Scale facts").
"""

from __future__ import annotations

from typing import Final

from pipeline.codec.watch_event import EventType, LiveEvent, SnapshotChunk, WatchRecord
from pipeline.content.scale import SCALED_RESOURCES
from pipeline.models import compare_versions

__all__ = ["MAX_OBJECTS", "Predecessors"]

#: Objects remembered at once; past it the memory starts over (a few events go without a scale key).
MAX_OBJECTS: Final = 65_536

_ObjectKey = tuple[str, str, str]  # (route, group/resource key, uid)


class Predecessors:
    """Per scalable object: its newest version seen and the version before it."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[_ObjectKey, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def forget(self) -> None:
        """Partitions moved: another member may have admitted versions this memory never saw."""
        self._seen.clear()

    def _remember(self, key: _ObjectKey, version: str, previous: str) -> None:
        if len(self._seen) >= MAX_OBJECTS and key not in self._seen:
            self._seen.clear()
        self._seen[key] = (version, previous)

    def live(self, watch: WatchRecord) -> str:
        """The version before this live event's ("" when unknown); remembers the event's version.

        A redelivered event gets the predecessor it had; an event older than the newest seen (a
        re-read after a restart at an earlier offset) gets none and leaves the memory as it was.
        """
        body = watch.body
        gr = watch.stream.group_resource
        if not isinstance(body, LiveEvent) or (gr.group, gr.resource) not in SCALED_RESOURCES:
            return ""
        key = (watch.head.route, gr.key, body.uid)
        version = body.resource_version
        if body.type == EventType.DELETED or body.deleting or not body.uid:
            self._seen.pop(key, None)
            return ""
        seen = self._seen.get(key)
        if seen is None:
            self._remember(key, version, "")
            return ""
        newest, before = seen
        if newest == version:
            return before
        if compare_versions(newest, version) != -1:
            return ""
        self._remember(key, version, newest)
        return newest

    def snapshot(self, watch: WatchRecord) -> None:
        """Remember the versions a snapshot chunk lists: each is the predecessor of the object's
        next live event (the watch resumes at the list's version), never known before it."""
        body = watch.body
        gr = watch.stream.group_resource
        if not isinstance(body, SnapshotChunk) or (gr.group, gr.resource) not in SCALED_RESOURCES:
            return
        for obj in body.objects:
            if obj.uid:
                key = (watch.head.route, gr.key, obj.uid)
                seen = self._seen.get(key)
                if seen is None or compare_versions(seen[0], obj.resource_version) == -1:
                    self._remember(key, obj.resource_version, "")
