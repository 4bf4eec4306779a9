"""The `watch_event` record (`schemas/watch_event.avsc`): its one owner.

The watch stage (and the demo, which plays a recording as the watch stage would) writes these; the
router reads them. The envelope names the stream (route, cluster, target, group/version/resource,
scope) and carries one body: a live event or one piece of a snapshot. The variant names (`Kind`)
and every field name are spelled here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Final, Self

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, codec
from pipeline.log.api import PendingRecord, Record
from pipeline.models import GroupResource, stream_key

__all__ = [
    "Body",
    "EventType",
    "Kind",
    "LiveEvent",
    "SnapshotBegin",
    "SnapshotChunk",
    "SnapshotEnd",
    "SnapshotObject",
    "StreamHead",
    "WatchEventWriter",
    "WatchRecord",
    "decode_watch_event",
]

# Room the Avro framing of one snapshot object takes around its strings and payload.
_PER_OBJECT_BYTES: Final = 32


class Kind(StrEnum):
    """The body variants: the Avro record names of the `body` union."""

    LIVE = "reverser.watch.LiveEvent"
    SNAPSHOT_BEGIN = "reverser.watch.SnapshotBegin"
    SNAPSHOT_CHUNK = "reverser.watch.SnapshotChunk"
    SNAPSHOT_END = "reverser.watch.SnapshotEnd"


class EventType(StrEnum):
    """The watch event types a live event carries (BOOKMARK and ERROR never reach the log)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class StreamHead:
    """What every record of one watch stream says about the stream."""

    route: str
    cluster: str
    target: str
    group: str
    version: str
    resource: str
    scope: str

    @property
    def group_resource(self) -> GroupResource:
        return GroupResource(self.group, self.resource)


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """One ADDED/MODIFIED/DELETED event; `deleting` when the object carries a deletionTimestamp."""

    type: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str]
    deleting: bool
    object_json: bytes

    kind: ClassVar[StrEnum] = Kind.LIVE

    def to_avro(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "labels": dict(self.labels),
            "deleting": self.deleting,
            "object": self.object_json,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> LiveEvent:
        return cls(
            data["type"],
            data["namespace"],
            data["name"],
            data["uid"],
            data["resourceVersion"],
            data["labels"],
            data["deleting"],
            data["object"],
        )


@dataclass(frozen=True, slots=True)
class SnapshotBegin:
    """A snapshot of the stream starts (`resource_version` of the list, when known)."""

    epoch: int
    resource_version: str = ""

    kind: ClassVar[StrEnum] = Kind.SNAPSHOT_BEGIN

    def to_avro(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "resourceVersion": self.resource_version}

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(data["epoch"], data["resourceVersion"])


@dataclass(frozen=True, slots=True)
class SnapshotObject:
    """One object of a snapshot, already sanitized and serialised (the branch-work resync object too)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes

    @property
    def size_estimate(self) -> int:
        """Bytes this object adds to a chunk record, framing included."""
        return (
            len(self.object_json)
            + len(self.namespace)
            + len(self.name)
            + len(self.uid)
            + len(self.resource_version)
            + _PER_OBJECT_BYTES
        )

    def to_avro(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "object": self.object_json,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> SnapshotObject:
        return cls(data["namespace"], data["name"], data["uid"], data["resourceVersion"], data["object"])


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """Objects `seq` of snapshot `epoch`; `since` is the stream's cursor before the snapshot (empty
    without one): objects newer than it changed while the watch was not streaming."""

    epoch: int
    seq: int
    objects: tuple[SnapshotObject, ...] = field(default=())
    since: str = ""

    kind: ClassVar[StrEnum] = Kind.SNAPSHOT_CHUNK

    def to_avro(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "seq": self.seq,
            "objects": [o.to_avro() for o in self.objects],
            "since": self.since,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> SnapshotChunk:
        objects = tuple(SnapshotObject.from_avro(o) for o in data["objects"])
        return cls(data["epoch"], data["seq"], objects, data["since"])


@dataclass(frozen=True, slots=True)
class SnapshotEnd:
    """Snapshot `epoch` is complete: `chunks` chunks holding `objects` objects; `since` as on its chunks."""

    epoch: int
    chunks: int
    objects: int
    resource_version: str
    since: str = ""

    kind: ClassVar[StrEnum] = Kind.SNAPSHOT_END

    def to_avro(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "chunks": self.chunks,
            "objects": self.objects,
            "resourceVersion": self.resource_version,
            "since": self.since,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(data["epoch"], data["chunks"], data["objects"], data["resourceVersion"], data["since"])


Body = LiveEvent | SnapshotBegin | SnapshotChunk | SnapshotEnd
_BODIES: Final[dict[str, type[Body]]] = {
    body.kind: body for body in (LiveEvent, SnapshotBegin, SnapshotChunk, SnapshotEnd)
}


class WatchEventWriter:
    """Encodes the records of one stream: same key (so one partition keeps its order), headers
    naming the target and scope (so consumers can filter without decoding)."""

    __slots__ = ("_base", "_codec", "headers", "key")

    def __init__(self, head: StreamHead) -> None:
        self._codec = codec(WATCH_EVENT)
        self.key = stream_key(head.route, head.group_resource)
        self.headers = (
            self._codec.header,
            ("target", head.target.encode()),
            ("scope", head.scope.encode()),
        )
        self._base = {
            "route": head.route,
            "cluster": head.cluster,
            "target": head.target,
            "group": head.group,
            "version": head.version,
            "resource": head.resource,
            "scope": head.scope,
        }

    def record(self, body: Body, observed_at_ms: int) -> PendingRecord:
        value = self._codec.encode(
            {**self._base, "observedAtMs": observed_at_ms, "body": (body.kind.value, body.to_avro())}
        )
        return PendingRecord(value, key=self.key, headers=self.headers)


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
    body: Body

    @property
    def head(self) -> StreamHead:
        return StreamHead(
            self.route,
            self.cluster,
            self.target,
            self.group_resource.group,
            self.version,
            self.group_resource.resource,
            self.scope,
        )

    @property
    def kind(self) -> StrEnum:
        return self.body.kind

    @property
    def is_live(self) -> bool:
        return isinstance(self.body, LiveEvent)


def decode_watch_event(record: Record) -> WatchRecord:
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
        body=_BODIES[kind].from_avro(body),
    )
