"""The `branch_work` record (`schemas/branch_work.avsc`): its one owner.

The router writes one per watch record and claiming target, keyed by (provider, branch); the commit
worker reads them as its FIFO. The author is stored in every `Write` (instead of recomputed) so a
replay of `<prefix>.branch-work` rebuilds the same history long after the audit facts aged out.
Variant names (`Kind`), enums and every field name are spelled here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Final

from pipeline.codec import BRANCH_WORK, SCHEMA_HEADER, DecodeError, codec
from pipeline.codec.watch_event import EventType, SnapshotBegin, SnapshotObject
from pipeline.config import TargetSettings
from pipeline.log.api import PendingRecord, Record
from pipeline.models import branch_key
from pipeline.operation import Operation
from pipeline.prune import Prune

__all__ = [
    "NOT_ATTEMPTED",
    "SERVICE_ACCOUNT_PREFIX",
    "ActorKind",
    "Body",
    "CommitRequested",
    "Kind",
    "LateAuthor",
    "Operation",
    "Outcome",
    "Prune",
    "Removal",
    "ResyncBegin",
    "ResyncChunk",
    "ResyncEnd",
    "ResyncObject",
    "TargetDeleted",
    "WorkAuthor",
    "WorkItem",
    "Write",
    "decode_work",
    "encode_work",
    "operation_of",
    "work_record",
]


class Kind(StrEnum):
    """The body variants: the Avro record names of the `body` union."""

    WRITE = "reverser.router.Write"
    RESYNC_BEGIN = "reverser.router.ResyncBegin"
    RESYNC_CHUNK = "reverser.router.ResyncChunk"
    RESYNC_END = "reverser.router.ResyncEnd"
    TARGET_DELETED = "reverser.router.TargetDeleted"
    COMMIT_REQUESTED = "reverser.router.CommitRequested"
    LATE_AUTHOR = "reverser.router.LateAuthor"


def operation_of(event_type: str, deleting: bool) -> Operation:
    """ADDED→CREATE, MODIFIED→UPDATE, DELETED→DELETE; anything carrying deletionTimestamp is DELETE."""
    if deleting or event_type == EventType.DELETED:
        return Operation.DELETE
    return Operation.CREATE if event_type == EventType.ADDED else Operation.UPDATE


class Outcome(StrEnum):
    """What attribution made of a write: a named author, none found, or not tried (no fact index)."""

    RESOLVED = "RESOLVED"
    UNRESOLVED = "UNRESOLVED"
    NOT_ATTEMPTED = "NOT_ATTEMPTED"


SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"


class ActorKind(StrEnum):
    """Who an author is: a Kubernetes service account, anyone else, or nobody (no author)."""

    USER = "user"
    SERVICE_ACCOUNT = "serviceaccount"
    NONE = "none"

    @classmethod
    def of(cls, author: str) -> ActorKind:
        """`none` for no author, `serviceaccount` for `system:serviceaccount:*`, else `user`."""
        if not author:
            return cls.NONE
        return cls.SERVICE_ACCOUNT if author.startswith(SERVICE_ACCOUNT_PREFIX) else cls.USER


@dataclass(frozen=True, slots=True)
class WorkAuthor:
    """The author stored in every `Write`: the router resolves it, the commit worker commits under it.

    `event_time_ms` is when the change was made according to the matched audit fact (its stage
    time), 0 when no fact names it; commit windows measure silence in it (docs/commit-worker.md).
    """

    outcome: Outcome
    username: str = ""
    display_name: str = ""
    email: str = ""
    tier: str = "absent"
    actor_kind: str = ActorKind.NONE
    event_time_ms: int = 0

    def to_avro(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "username": self.username,
            "displayName": self.display_name,
            "email": self.email,
            "tier": self.tier,
            "actorKind": self.actor_kind,
            "eventTimeMs": self.event_time_ms,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> WorkAuthor:
        return cls(
            Outcome(data["outcome"]),
            data["username"],
            data["displayName"],
            data["email"],
            data["tier"],
            data["actorKind"],
            data.get("eventTimeMs", 0),
        )


NOT_ATTEMPTED: Final = WorkAuthor(Outcome.NOT_ATTEMPTED, tier="none")


@dataclass(frozen=True, slots=True)
class Write:
    """Write (or delete, `object_json` None) one object under `author`."""

    operation: Operation
    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes | None
    author: WorkAuthor

    kind: ClassVar[StrEnum] = Kind.WRITE

    def to_avro(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "object": self.object_json,
            "author": self.author.to_avro(),
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> Write:
        return cls(
            operation=Operation(data["operation"]),
            namespace=data["namespace"],
            name=data["name"],
            uid=data["uid"],
            resource_version=data["resourceVersion"],
            object_json=data["object"],
            author=WorkAuthor.from_avro(data["author"]),
        )


# The resync begin carries exactly what the watch's snapshot begin carries, under another record name.


@dataclass(frozen=True, slots=True)
class ResyncBegin(SnapshotBegin):
    kind: ClassVar[StrEnum] = Kind.RESYNC_BEGIN


#: A resync object is the watch's snapshot object (the same five fields).
ResyncObject = SnapshotObject


@dataclass(frozen=True, slots=True)
class ResyncChunk:
    """The objects of a snapshot chunk (without its `since`: the router already acted on it)."""

    epoch: int
    seq: int
    objects: tuple[ResyncObject, ...]

    kind: ClassVar[StrEnum] = Kind.RESYNC_CHUNK

    def to_avro(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "seq": self.seq, "objects": [o.to_avro() for o in self.objects]}

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> ResyncChunk:
        return cls(data["epoch"], data["seq"], tuple(ResyncObject.from_avro(o) for o in data["objects"]))


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

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> Removal:
        return cls(data["uid"], data["namespace"], data["name"], WorkAuthor.from_avro(data["author"]))


@dataclass(frozen=True, slots=True)
class ResyncEnd:
    """The snapshot's end, with the deletion evidence for its scope (None: attribution not attempted)."""

    epoch: int
    chunks: int
    objects: int
    resource_version: str
    removals: tuple[Removal, ...] | None = None

    kind: ClassVar[StrEnum] = Kind.RESYNC_END

    def to_avro(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "chunks": self.chunks,
            "objects": self.objects,
            "resourceVersion": self.resource_version,
            "removals": None if self.removals is None else [r.to_avro() for r in self.removals],
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> ResyncEnd:
        found = data.get("removals")
        removals = None if found is None else tuple(Removal.from_avro(r) for r in found)
        return cls(data["epoch"], data["chunks"], data["objects"], data["resourceVersion"], removals)


def _prune(value: str) -> Prune:
    """The prune mode a `TargetDeleted` names (a plain string on the wire, so checked here)."""
    try:
        return Prune(value)
    except ValueError:
        raise DecodeError(f"{BRANCH_WORK}: unknown prune mode {value!r}") from None


@dataclass(frozen=True, slots=True)
class TargetDeleted:
    """A target left the configuration (version `config_version`): the last record of it on its branch.

    Written by the configuration controller in the transaction that publishes that version, so the
    branch's FIFO learns it in log order, after every record routed for the target before. The
    decision to remove its documents (`remove_files`) is taken once, by the writer
    (`pipeline.customresources.retire`), so every replay of the record does the same.
    """

    prune: Prune
    remove_files: bool
    config_version: int
    reason: str

    kind: ClassVar[StrEnum] = Kind.TARGET_DELETED

    def to_avro(self) -> dict[str, Any]:
        return {
            "prune": self.prune,
            "removeFiles": self.remove_files,
            "configVersion": self.config_version,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> TargetDeleted:
        return cls(_prune(data["prune"]), data["removeFiles"], data["configVersion"], data["reason"])


@dataclass(frozen=True, slots=True)
class CommitRequested:
    """A CommitRequest (gitops-reverser's "save now") for the item's target.

    Written by the configuration controller, keyed by the target's (provider, branch) like the rest
    of its work, so the branch's FIFO meets it in log order, after every change routed before it:
    what "now" means is the log's order, not the clock of whichever replica owns the branch.
    """

    namespace: str
    name: str
    uid: str
    message: str
    close_delay_s: int

    kind: ClassVar[StrEnum] = Kind.COMMIT_REQUESTED

    def to_avro(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "message": self.message,
            "closeDelaySeconds": self.close_delay_s,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> CommitRequested:
        return cls(data["namespace"], data["name"], data["uid"], data["message"], data["closeDelaySeconds"])


@dataclass(frozen=True, slots=True)
class LateAuthor:
    """The author of an earlier `Write` that was committed as unresolved, named by a fact that came late.

    The router appends it to the same branch partition once the fact is filed; the commit worker
    records the author beside the commit (a git note, the object-state record) and never rewrites
    the pushed history. `work_partition`/`work_offset` are where that `Write` sits on branch-work,
    which the commit's `Reverser-Offset` trailers locate; `resolved_at_ms` minus the item's
    observation time is how late the fact was.
    """

    operation: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    author: WorkAuthor
    work_partition: int
    work_offset: int
    resolved_at_ms: int

    kind: ClassVar[StrEnum] = Kind.LATE_AUTHOR

    def to_avro(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "author": self.author.to_avro(),
            "workPartition": self.work_partition,
            "workOffset": self.work_offset,
            "resolvedAtMs": self.resolved_at_ms,
        }

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> LateAuthor:
        return cls(
            data["operation"],
            data["namespace"],
            data["name"],
            data["uid"],
            data["resourceVersion"],
            WorkAuthor.from_avro(data["author"]),
            data["workPartition"],
            data["workOffset"],
            data["resolvedAtMs"],
        )


Body = Write | ResyncBegin | ResyncChunk | ResyncEnd | TargetDeleted | CommitRequested | LateAuthor
_BODIES: Final[dict[str, type[Body]]] = {
    body.kind: body
    for body in (Write, ResyncBegin, ResyncChunk, ResyncEnd, TargetDeleted, CommitRequested, LateAuthor)
}


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One branch-work record: where it sits on the log, whom it is for, and what it asks.

    `partition`/`offset` are the record's own position once read (not part of the payload);
    `source_partition`/`source_offset` are the watch record it was routed from.
    """

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
    source_partition: int = 0
    source_offset: int = 0

    @property
    def stream(self) -> tuple[str, str, str, str]:
        """(target, group, resource, scope): the unit a snapshot epoch belongs to."""
        return (self.target, self.group, self.resource, self.scope)

    @classmethod
    def for_target(cls, target: TargetSettings, branch: str, observed_at_ms: int, body: Body) -> WorkItem:
        """A record about a whole target (a deletion, a CommitRequest), not one of its streams."""
        return cls(
            partition=0,
            offset=0,
            provider=target.provider,
            branch=branch,
            target=target.name,
            path=target.path,
            cluster=target.cluster,
            group="",
            version="",
            resource="",
            scope="",
            observed_at_ms=observed_at_ms,
            body=body,
        )


def encode_work(item: WorkItem) -> bytes:
    """The record value of one work item (its own partition and offset are not part of it)."""
    return codec(BRANCH_WORK).encode(
        {
            "provider": item.provider,
            "branch": item.branch,
            "target": item.target,
            "path": item.path,
            "cluster": item.cluster,
            "group": item.group,
            "version": item.version,
            "resource": item.resource,
            "scope": item.scope,
            "source": {
                "partition": item.source_partition,
                "offset": item.source_offset,
                "observedAtMs": item.observed_at_ms,
            },
            "body": (item.body.kind.value, item.body.to_avro()),
        }
    )


def work_record(item: WorkItem) -> PendingRecord:
    """The record of one work item: keyed by (provider, branch), its target in a header."""
    return PendingRecord(
        encode_work(item),
        key=branch_key(item.provider, item.branch),
        headers=(codec(BRANCH_WORK).header, ("target", item.target.encode())),
    )


def decode_work(record: Record) -> WorkItem:
    """Decode one branch-work record; raises `DecodeError` for anything the worker cannot use."""
    data = codec(BRANCH_WORK).decode(record.value, record.header(SCHEMA_HEADER))
    kind, body = data["body"]
    body_type = _BODIES.get(kind)
    if body_type is None:
        raise DecodeError(f"{BRANCH_WORK}: unknown body {kind!r}")
    source = data["source"]
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
        observed_at_ms=source["observedAtMs"],
        body=body_type.from_avro(body),
        source_partition=source["partition"],
        source_offset=source["offset"],
    )
