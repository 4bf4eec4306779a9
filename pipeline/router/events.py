"""The work items the router builds from watch records (both formats are `pipeline.codec`'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pipeline.authormode import DEFAULT_ATTRIBUTION_MODE, AttributionMode
from pipeline.codec.branch_work import (
    NOT_ATTEMPTED,
    Body,
    Operation,
    Outcome,
    Removal,
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    WorkAuthor,
    WorkItem,
    Write,
    operation_of,
)
from pipeline.codec.watch_event import LiveEvent, SnapshotBegin, SnapshotChunk, SnapshotObject, WatchRecord
from pipeline.models import compare_versions

__all__ = [
    "CONFIGURED_AUTHOR",
    "CaughtUp",
    "Destination",
    "Removal",
    "caught_up_item",
    "changed_objects",
    "work_item",
    "work_items",
]


CONFIGURED_AUTHOR: Final = WorkAuthor(Outcome.NOT_ATTEMPTED, tier=AttributionMode.CONFIGURED_AUTHOR.value)
"""The author of a configured-author target's live change: the committer, and the commit's
`Reverser-Attribution` trailer says why (not `none`, which is any change attribution was not tried for)."""


def changed_objects(watch: WatchRecord) -> list[SnapshotObject]:
    """The objects of a snapshot chunk that changed after the stream's cursor (`since`).

    They were changed while nothing was streaming (the cursor expired, the leader changed), so no
    live event carried them: they are attributed like live events. Objects at or below the cursor
    were already on the log. A chunk without a cursor is a baseline (nothing to catch up with); an
    object whose version cannot be compared with the cursor counts as changed.
    """
    body = watch.body
    if not isinstance(body, SnapshotChunk) or not body.since:
        return []
    return [o for o in body.objects if compare_versions(o.resource_version, body.since) in (None, 1)]


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """A snapshot object that changed while the watch was down, as the change its fact names."""

    obj: SnapshotObject
    operation: Operation
    author: WorkAuthor


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one target's work goes: the (provider, branch) FIFO and the folder on that branch.

    `attribution` is the target's mode: in `configured-author` its records are routed without asking
    the fact index (no grace, no hold), so the committer authors them.
    """

    provider: str
    branch: str
    path: str
    attribution: AttributionMode = DEFAULT_ATTRIBUTION_MODE


def caught_up_item(watch: WatchRecord, destination: Destination, change: CaughtUp) -> WorkItem:
    """The branch-work `Write` for a snapshot object that changed while the watch was down.

    It goes on the branch right before the chunk that carries the object, inside the snapshot, so
    the commit worker commits it under its author before the snapshot's own commit (which then
    finds the file already up to date).
    """
    write = _write(change.obj, change.operation, change.obj.object_json, change.author)
    return _item(watch, destination, write)


def _write(
    obj: LiveEvent | SnapshotObject, operation: Operation, object_json: bytes | None, author: WorkAuthor
) -> Write:
    return Write(operation, obj.namespace, obj.name, obj.uid, obj.resource_version, object_json, author)


def _work_body(
    watch: WatchRecord, destination: Destination, author: WorkAuthor | None, removals: list[Removal] | None
) -> Body:
    body = watch.body
    if isinstance(body, LiveEvent):
        operation = operation_of(body.type, body.deleting)
        object_json = None if operation is Operation.DELETE else body.object_json
        if author is None:
            configured = destination.attribution is AttributionMode.CONFIGURED_AUTHOR
            author = CONFIGURED_AUTHOR if configured else NOT_ATTEMPTED
        return _write(body, operation, object_json, author)
    if isinstance(body, SnapshotBegin):
        return ResyncBegin(body.epoch, body.resource_version)
    if isinstance(body, SnapshotChunk):
        return ResyncChunk(body.epoch, body.seq, body.objects)
    evidence = None if removals is None else tuple(removals)
    return ResyncEnd(body.epoch, body.chunks, body.objects, body.resource_version, evidence)


def work_item(
    watch: WatchRecord,
    destination: Destination,
    author: WorkAuthor | None,
    removals: list[Removal] | None = None,
) -> WorkItem:
    """The branch-work item for one watch record and one claiming target (not yet on the log).

    `removals` is a snapshot end's deletion evidence (None: attribution not attempted).
    """
    return _item(watch, destination, _work_body(watch, destination, author, removals))


def work_items(
    watch: WatchRecord,
    destination: Destination,
    author: WorkAuthor | None,
    caught_up: list[CaughtUp],
    removals: list[Removal] | None,
) -> list[WorkItem]:
    """Everything one watch record becomes on branch-work for one target, in order.

    Snapshot objects that changed while the watch was down come first, so they are committed
    under their authors before the chunk that carries them.
    """
    items = [caught_up_item(watch, destination, change) for change in caught_up]
    items.append(work_item(watch, destination, author, removals))
    return items


def _item(watch: WatchRecord, destination: Destination, body: Body) -> WorkItem:
    return WorkItem(
        partition=0,
        offset=0,
        provider=destination.provider,
        branch=destination.branch,
        path=destination.path,
        stream=watch.stream,
        observed_at_ms=watch.observed_at_ms,
        body=body,
        source_partition=watch.partition,
        source_offset=watch.offset,
    )
