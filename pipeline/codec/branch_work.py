"""The `branch_work` record (`schemas/branch_work.avsc`): its one owner.

The router writes one per watch record and claiming target, keyed by (provider, branch); the commit
worker reads them as its FIFO. The author is stored in every `Write` (instead of recomputed) so a
replay of `<prefix>.branch-work` rebuilds the same history long after the audit facts aged out.
Variant names (`Kind`), enums and every field name are spelled here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Final

from pipeline.codec import BRANCH_WORK, SCHEMA_HEADER, codec
from pipeline.codec.binding import AvroRecord, Wire
from pipeline.codec.stream_id import StreamId
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
class WorkAuthor(AvroRecord):
    """The author stored in every `Write`: the router resolves it, the commit worker commits under it.

    `event_time_ms` is when the change was made according to the matched audit fact (its stage
    time), 0 when no fact names it; commit windows measure silence in it (docs/commit-worker.md).
    `tier` stays a string: its closed set (`pipeline.attribution.Tier`) is attribution's, a layer
    above the records, and the commit worker only copies it into a trailer.
    """

    outcome: Outcome
    username: str = ""
    display_name: str = ""
    email: str = ""
    tier: str = "absent"
    actor_kind: ActorKind = ActorKind.NONE
    event_time_ms: int = 0


NOT_ATTEMPTED: Final = WorkAuthor(Outcome.NOT_ATTEMPTED, tier="none")


@dataclass(frozen=True, slots=True)
class Write(AvroRecord):
    """Write (or delete, `object_json` None) one object under `author`."""

    operation: Operation
    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes | None
    author: WorkAuthor

    kind: ClassVar[StrEnum] = Kind.WRITE
    avro_fields = {"object_json": "object"}


# The resync begin carries exactly what the watch's snapshot begin carries, under another record name.


@dataclass(frozen=True, slots=True)
class ResyncBegin(SnapshotBegin):
    kind: ClassVar[StrEnum] = Kind.RESYNC_BEGIN


#: A resync object is the watch's snapshot object (the same five fields).
ResyncObject = SnapshotObject


@dataclass(frozen=True, slots=True)
class ResyncChunk(AvroRecord):
    """The objects of a snapshot chunk (without its `since`: the router already acted on it)."""

    epoch: int
    seq: int
    objects: tuple[ResyncObject, ...]

    kind: ClassVar[StrEnum] = Kind.RESYNC_CHUNK


@dataclass(frozen=True, slots=True)
class Removal(AvroRecord):
    """Deletion evidence for one object of a snapshot's scope (see `Resolver.deletions`)."""

    uid: str
    namespace: str
    name: str
    author: WorkAuthor


@dataclass(frozen=True, slots=True)
class ResyncEnd(AvroRecord):
    """The snapshot's end, with the deletion evidence for its scope (None: attribution not attempted)."""

    epoch: int
    chunks: int
    objects: int
    resource_version: str
    removals: tuple[Removal, ...] | None = None

    kind: ClassVar[StrEnum] = Kind.RESYNC_END


@dataclass(frozen=True, slots=True)
class TargetDeleted(AvroRecord):
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


@dataclass(frozen=True, slots=True)
class CommitRequested(AvroRecord):
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
    avro_fields = {"close_delay_s": "closeDelaySeconds"}


@dataclass(frozen=True, slots=True)
class LateAuthor(AvroRecord):
    """The author of an earlier `Write` that was committed as unresolved, named by a fact that came late.

    The router appends it to the same branch partition once the fact is filed; the commit worker
    records the author beside the commit (a git note, the object-state record) and never rewrites
    the pushed history. `work_partition`/`work_offset` are where that `Write` sits on branch-work,
    which the commit's `Reverser-Offset` trailers locate; `resolved_at_ms` minus the item's
    observation time is how late the fact was.
    """

    operation: Operation
    namespace: str
    name: str
    uid: str
    resource_version: str
    author: WorkAuthor
    work_partition: int
    work_offset: int
    resolved_at_ms: int

    kind: ClassVar[StrEnum] = Kind.LATE_AUTHOR


Body = Write | ResyncBegin | ResyncChunk | ResyncEnd | TargetDeleted | CommitRequested | LateAuthor


@dataclass(frozen=True, slots=True)
class WorkItem(AvroRecord):
    """One branch-work record: where it sits on the log, whom it is for, and what it asks.

    `partition`/`offset` are the record's own position once read (not part of the payload);
    `source_partition`/`source_offset` are the watch record it was routed from.
    """

    partition: int
    offset: int
    provider: str
    branch: str
    path: str
    stream: StreamId
    observed_at_ms: int
    body: Body
    source_partition: int = 0
    source_offset: int = 0

    avro_fields = {
        "partition": Wire(local=True),
        "offset": Wire(local=True),
        "stream": Wire(spread=True),
        "observed_at_ms": "source.observedAtMs",
        "source_partition": "source.partition",
        "source_offset": "source.offset",
    }

    @property
    def snapshot_key(self) -> tuple[str, str, str, str]:
        """(target, group, resource, scope): the unit a snapshot epoch belongs to."""
        stream = self.stream
        return (stream.target, stream.group, stream.resource, stream.scope)

    @classmethod
    def for_target(cls, target: TargetSettings, branch: str, observed_at_ms: int, body: Body) -> WorkItem:
        """A record about a whole target (a deletion, a CommitRequest), not one of its streams."""
        return cls(
            partition=0,
            offset=0,
            provider=target.provider,
            branch=branch,
            path=target.path,
            stream=StreamId(target.name, target.cluster, "", "", "", ""),
            observed_at_ms=observed_at_ms,
            body=body,
        )


def encode_work(item: WorkItem) -> bytes:
    """The record value of one work item (its own partition and offset are not part of it)."""
    return codec(BRANCH_WORK).encode(item.to_avro())


def work_record(item: WorkItem) -> PendingRecord:
    """The record of one work item: keyed by (provider, branch), its target in a header."""
    return PendingRecord(
        encode_work(item),
        key=branch_key(item.provider, item.branch),
        headers=(codec(BRANCH_WORK).header, ("target", item.stream.target.encode())),
    )


def decode_work(record: Record) -> WorkItem:
    """Decode one branch-work record; raises `DecodeError` for anything the worker cannot use."""
    data = codec(BRANCH_WORK).decode(record.value, record.header(SCHEMA_HEADER))
    return WorkItem.from_avro(data, partition=record.partition, offset=record.offset)
