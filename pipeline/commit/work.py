"""Branch-work records as the commit worker sees them: decoded once, slotted, immutable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.codec import BRANCH_WORK, SCHEMA_HEADER, DecodeError, codec
from pipeline.log.api import Record
from pipeline.work import WorkAuthor

__all__ = [
    "Removal",
    "ResyncBegin",
    "ResyncChunk",
    "ResyncEnd",
    "ResyncObject",
    "WorkItem",
    "Write",
    "decode_work",
]

WRITE = "reverser.router.Write"
RESYNC_BEGIN = "reverser.router.ResyncBegin"
RESYNC_CHUNK = "reverser.router.ResyncChunk"
RESYNC_END = "reverser.router.ResyncEnd"


@dataclass(frozen=True, slots=True)
class Write:
    operation: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes | None
    author: WorkAuthor


@dataclass(frozen=True, slots=True)
class ResyncBegin:
    epoch: int
    resource_version: str


@dataclass(frozen=True, slots=True)
class ResyncObject:
    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes


@dataclass(frozen=True, slots=True)
class ResyncChunk:
    epoch: int
    seq: int
    objects: tuple[ResyncObject, ...]


@dataclass(frozen=True, slots=True)
class Removal:
    """Deletion evidence the router attached to a snapshot's end: who deleted this object.

    `uid` is "" for a name-keyed delete, `name` "" for a uid listed by a deletecollection.
    """

    uid: str
    namespace: str
    name: str
    author: WorkAuthor


@dataclass(frozen=True, slots=True)
class ResyncEnd:
    epoch: int
    chunks: int
    objects: int
    resource_version: str
    # None: attribution was not attempted (no fact index); () : attempted, no deletion evidence.
    removals: tuple[Removal, ...] | None = None


Body = Write | ResyncBegin | ResyncChunk | ResyncEnd


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One branch-work record: where it sits on the log, whom it is for, and what it asks."""

    partition: int
    offset: int
    provider: str
    branch: str
    target: str
    path: str
    cluster: str
    group: str
    version: str
    resource: str
    scope: str
    observed_at_ms: int
    body: Body

    @property
    def stream(self) -> tuple[str, str, str, str]:
        """(target, group, resource, scope): the unit a snapshot epoch belongs to."""
        return (self.target, self.group, self.resource, self.scope)


def _body(kind: str, data: dict[str, Any]) -> Body:
    if kind == WRITE:
        return Write(
            operation=data["operation"],
            namespace=data["namespace"],
            name=data["name"],
            uid=data["uid"],
            resource_version=data["resourceVersion"],
            object_json=data["object"],
            author=WorkAuthor.from_avro(data["author"]),
        )
    if kind == RESYNC_BEGIN:
        return ResyncBegin(data["epoch"], data["resourceVersion"])
    if kind == RESYNC_CHUNK:
        objects = tuple(
            ResyncObject(o["namespace"], o["name"], o["uid"], o["resourceVersion"], o["object"])
            for o in data["objects"]
        )
        return ResyncChunk(data["epoch"], data["seq"], objects)
    if kind == RESYNC_END:
        found = data.get("removals")
        removals = None if found is None else tuple(
            Removal(r["uid"], r["namespace"], r["name"], WorkAuthor.from_avro(r["author"])) for r in found
        )
        return ResyncEnd(data["epoch"], data["chunks"], data["objects"], data["resourceVersion"], removals)
    raise DecodeError(f"branch_work: unknown body {kind!r}")


def decode_work(record: Record) -> WorkItem:
    """Decode one branch-work record; raises `DecodeError` for anything the worker cannot use."""
    data = codec(BRANCH_WORK).decode(record.value, record.header(SCHEMA_HEADER))
    kind, body = data["body"]
    return WorkItem(
        partition=record.partition,
        offset=record.offset,
        provider=data["provider"],
        branch=data["branch"],
        target=data["target"],
        path=data["path"],
        cluster=data["cluster"],
        group=data["group"],
        version=data["version"],
        resource=data["resource"],
        scope=data["scope"],
        observed_at_ms=data["source"]["observedAtMs"],
        body=_body(kind, body),
    )
