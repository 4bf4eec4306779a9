"""Watch-event records as the router sees them, and the work items it builds from them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, codec
from pipeline.log.api import Record
from pipeline.models import GroupResource, compare_versions
from pipeline.work import NOT_ATTEMPTED, WorkAuthor

LIVE_EVENT = "reverser.watch.LiveEvent"
SNAPSHOT_BEGIN = "reverser.watch.SnapshotBegin"
SNAPSHOT_CHUNK = "reverser.watch.SnapshotChunk"
SNAPSHOT_END = "reverser.watch.SnapshotEnd"


class Operation(StrEnum):
    """The Git-side operation of a live event; a deletion is recorded at intent time."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"

    @classmethod
    def of(cls, event_type: str, deleting: bool) -> Operation:
        """ADDED→CREATE, MODIFIED→UPDATE, DELETED→DELETE; anything carrying deletionTimestamp is DELETE."""
        if deleting or event_type == "DELETED":
            return cls.DELETE
        return cls.CREATE if event_type == "ADDED" else cls.UPDATE

    @classmethod
    def of_verb(cls, verb: str) -> Operation:
        """The operation of a snapshot object from the verb of the fact that names it (no event type)."""
        return cls.CREATE if verb.lower() == "create" else cls.UPDATE


@dataclass(frozen=True, slots=True)
class WatchRecord:
    """One decoded watch-events record and where it came from."""

    partition: int
    offset: int
    route: str
    cluster: str
    target: str
    group_resource: GroupResource
    version: str
    scope: str
    observed_at_ms: int
    kind: str
    body: dict[str, Any]

    @property
    def is_live(self) -> bool:
        return self.kind == LIVE_EVENT


def decode_watch_record(record: Record) -> WatchRecord:
    """Decode a watch-events record; raises `pipeline.codec.DecodeError` when it cannot."""
    data = codec(WATCH_EVENT).decode(record.value, record.header(SCHEMA_HEADER))
    kind, body = data["body"]
    return WatchRecord(
        partition=record.partition,
        offset=record.offset,
        route=data["route"],
        cluster=data["cluster"],
        target=data["target"],
        group_resource=GroupResource(data["group"], data["resource"]),
        version=data["version"],
        scope=data["scope"],
        observed_at_ms=data["observedAtMs"],
        kind=kind,
        body=body,
    )


def changed_objects(watch: WatchRecord) -> list[dict[str, Any]]:
    """The objects of a snapshot chunk that changed after the stream's cursor (`since`).

    They were changed while nothing was streaming (the cursor expired, the leader changed), so no
    live event carried them: they are attributed like live events. Objects at or below the cursor
    were already on the log. A chunk without a cursor is a baseline (nothing to catch up with); an
    object whose version cannot be compared with the cursor counts as changed.
    """
    if watch.kind != SNAPSHOT_CHUNK:
        return []
    since = watch.body.get("since") or ""
    if not since:
        return []
    return [o for o in watch.body["objects"] if compare_versions(o["resourceVersion"], since) in (None, 1)]


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """A snapshot object that changed while the watch was down, as the change its fact names."""

    obj: dict[str, Any]
    operation: Operation
    author: WorkAuthor


@dataclass(frozen=True, slots=True)
class Removal:
    """Deletion evidence for one object of a snapshot's scope (see `Resolver.deletions`)."""

    uid: str
    namespace: str
    name: str
    author: WorkAuthor

    def to_avro(self) -> dict[str, Any]:
        author = self.author.to_avro()
        return {"uid": self.uid, "namespace": self.namespace, "name": self.name, "author": author}


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one target's work goes: the (provider, branch) FIFO and the folder on that branch."""

    provider: str
    branch: str
    path: str


def caught_up_item(watch: WatchRecord, destination: Destination, change: CaughtUp) -> dict[str, Any]:
    """The branch-work `Write` for a snapshot object that changed while the watch was down.

    It goes on the branch right before the chunk that carries the object, inside the snapshot, so
    the commit worker commits it under its author before the snapshot's own commit (which then
    finds the file already up to date).
    """
    obj = change.obj
    return _envelope(
        watch,
        destination,
        (
            "reverser.router.Write",
            {
                "operation": change.operation.value,
                "namespace": obj["namespace"],
                "name": obj["name"],
                "uid": obj["uid"],
                "resourceVersion": obj["resourceVersion"],
                "object": obj["object"],
                "author": change.author.to_avro(),
            },
        ),
    )


def work_item(
    watch: WatchRecord,
    destination: Destination,
    author: WorkAuthor | None,
    removals: list[Removal] | None = None,
) -> dict[str, Any]:
    """The branch-work record for one watch record and one claiming target.

    `removals` is a snapshot end's deletion evidence (None: attribution not attempted).
    """
    body = watch.body
    if watch.kind == LIVE_EVENT:
        operation = Operation.of(body["type"], body["deleting"])
        work_body: tuple[str, dict[str, Any]] = (
            "reverser.router.Write",
            {
                "operation": operation.value,
                "namespace": body["namespace"],
                "name": body["name"],
                "uid": body["uid"],
                "resourceVersion": body["resourceVersion"],
                "object": None if operation is Operation.DELETE else body["object"],
                "author": (author or NOT_ATTEMPTED).to_avro(),
            },
        )
    elif watch.kind == SNAPSHOT_BEGIN:
        work_body = ("reverser.router.ResyncBegin", dict(body))
    elif watch.kind == SNAPSHOT_CHUNK:
        work_body = (
            "reverser.router.ResyncChunk",
            {"epoch": body["epoch"], "seq": body["seq"], "objects": list(body["objects"])},
        )
    elif watch.kind == SNAPSHOT_END:
        evidence = None if removals is None else [r.to_avro() for r in removals]
        end = {k: body[k] for k in ("epoch", "chunks", "objects", "resourceVersion")}
        work_body = ("reverser.router.ResyncEnd", {**end, "removals": evidence})
    else:
        raise ValueError(f"unknown watch record kind {watch.kind!r}")
    return _envelope(watch, destination, work_body)


def _envelope(
    watch: WatchRecord, destination: Destination, work_body: tuple[str, dict[str, Any]]
) -> dict[str, Any]:
    return {
        "provider": destination.provider,
        "branch": destination.branch,
        "target": watch.target,
        "path": destination.path,
        "cluster": watch.cluster,
        "group": watch.group_resource.group,
        "version": watch.version,
        "resource": watch.group_resource.resource,
        "scope": watch.scope,
        "source": {
            "partition": watch.partition,
            "offset": watch.offset,
            "observedAtMs": watch.observed_at_ms,
        },
        "body": work_body,
    }
