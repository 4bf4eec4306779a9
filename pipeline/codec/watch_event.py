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
from typing import ClassVar, Final

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, codec
from pipeline.codec.avro_binary import write_long, write_string
from pipeline.codec.binding import AvroRecord, Wire
from pipeline.codec.stream_id import StreamId
from pipeline.log.api import PendingRecord, Record
from pipeline.models import stream_key

__all__ = [
    "HAND_WRITTEN",
    "Body",
    "EventType",
    "Kind",
    "LiveEvent",
    "LiveFields",
    "SnapshotBegin",
    "SnapshotChunk",
    "SnapshotEnd",
    "SnapshotObject",
    "StreamHead",
    "WatchEventWriter",
    "WatchRecord",
    "decode_watch_event",
    "encode_body",
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
class StreamHead(AvroRecord):
    """What every record of one watch stream says about the stream."""

    route: str
    stream: StreamId

    avro_fields = {"stream": Wire(spread=True)}


@dataclass(frozen=True, slots=True)
class LiveEvent(AvroRecord):
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
    avro_fields = {"object_json": "object"}


@dataclass(frozen=True, slots=True)
class SnapshotBegin(AvroRecord):
    """A snapshot of the stream starts (`resource_version` of the list, when known)."""

    epoch: int
    resource_version: str = ""

    kind: ClassVar[StrEnum] = Kind.SNAPSHOT_BEGIN


@dataclass(frozen=True, slots=True)
class SnapshotObject(AvroRecord):
    """One object of a snapshot, already sanitized and serialised (the branch-work resync object too)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes

    avro_fields = {"object_json": "object"}

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


@dataclass(frozen=True, slots=True)
class SnapshotChunk(AvroRecord):
    """Objects `seq` of snapshot `epoch`; `since` is the stream's cursor before the snapshot (empty
    without one): objects newer than it changed while the watch was not streaming."""

    epoch: int
    seq: int
    objects: tuple[SnapshotObject, ...] = field(default=())
    since: str = ""

    kind: ClassVar[StrEnum] = Kind.SNAPSHOT_CHUNK


@dataclass(frozen=True, slots=True)
class SnapshotEnd(AvroRecord):
    """Snapshot `epoch` is complete: `chunks` chunks holding `objects` objects; `since` as on its chunks."""

    epoch: int
    chunks: int
    objects: int
    resource_version: str
    since: str = ""

    kind: ClassVar[StrEnum] = Kind.SNAPSHOT_END


Body = LiveEvent | SnapshotBegin | SnapshotChunk | SnapshotEnd


# The schema version `encode_body` writes by hand; another current version falls back to fastavro.
HAND_WRITTEN: Final = b"watch_event/3"
_EVENT_TYPES: Final[dict[str, bytes]] = {name: write_long(index) for index, name in enumerate(EventType)}
_NO_OBJECT: Final = b"\x00"
_TRUE, _FALSE = b"\x01", b"\x00"
_END_OF_BLOCKS: Final = b"\x00"
# lengths below 64 are one byte in Avro's zigzag varint
_ONE_BYTE_MAX: Final = 64
_ONE_BYTE_LENGTHS: Final = tuple(write_long(size) for size in range(_ONE_BYTE_MAX))


#: A live event's fields in `LiveEvent`'s order (type, namespace, name, uid, resource_version,
#: labels, deleting, object_json): the watch stage writes one per event, and a tuple costs a
#: tenth of building the frozen dataclass it would only be encoded from.
LiveFields = tuple[str, str, str, str, str, Mapping[str, str], bool, bytes]


def _text(text: str) -> tuple[bytes, bytes]:
    """Avro `string` as its length prefix and its bytes, to join without concatenating."""
    data = text.encode()
    size = len(data)
    return _ONE_BYTE_LENGTHS[size] if size < _ONE_BYTE_MAX else write_long(size), data


def _snapshot_object(item: SnapshotObject, parts: list[bytes]) -> None:
    """Append the parts of one snapshot object to `parts` (a chunk is joined once)."""
    parts += _text(item.namespace)
    parts += _text(item.name)
    parts += _text(item.uid)
    parts += _text(item.resource_version)
    parts.append(write_long(len(item.object_json)))
    parts.append(item.object_json)


def _live_parts(fields: LiveFields, parts: list[bytes]) -> None:
    """Append a live event's branch index and record to `parts`: the one body written per
    event, so its fixed parts go in as tuples rather than one call per piece."""
    event_type, namespace, name, uid, resource_version, labels, deleting, obj = fields
    parts += (
        b"\x00",
        _EVENT_TYPES[event_type],
        *_text(namespace),
        *_text(name),
        *_text(uid),
        *_text(resource_version),
    )
    _live_rest(labels, deleting, obj, parts)


def _live_rest(labels: Mapping[str, str], deleting: bool, obj: bytes | None, parts: list[bytes]) -> None:
    """Append a live event's fields after its identity (labels, deleting, object) to `parts`."""
    if labels:
        parts.append(write_long(len(labels)))
        for key, value in labels.items():
            parts += _text(key)
            parts += _text(value)
    if obj is None:
        parts += (_END_OF_BLOCKS, _TRUE if deleting else _FALSE, _NO_OBJECT)
    else:
        parts += (_END_OF_BLOCKS, _TRUE if deleting else _FALSE, b"\x02", write_long(len(obj)), obj)


def encode_body(body: Body) -> bytes:
    """The `body` union of `watch_event` v3 in Avro binary: branch index, then the record.

    Written directly because fastavro's dict-per-record path was the largest single cost of the
    watch stage after JSON; byte-identical to fastavro (a property test pins it).
    """
    if isinstance(body, LiveEvent):
        parts: list[bytes] = []
        _live_parts(
            (
                body.type,
                body.namespace,
                body.name,
                body.uid,
                body.resource_version,
                body.labels,
                body.deleting,
                body.object_json,
            ),
            parts,
        )
        return b"".join(parts)
    if isinstance(body, SnapshotChunk):
        objects = body.objects
        parts = [b"\x04", write_long(body.epoch), write_long(body.seq)]
        if objects:
            parts.append(write_long(len(objects)))
            for item in objects:
                _snapshot_object(item, parts)
        parts.append(_END_OF_BLOCKS)
        parts.append(write_string(body.since))
        return b"".join(parts)
    if isinstance(body, SnapshotBegin):
        return b"\x02" + write_long(body.epoch) + write_string(body.resource_version)
    return b"".join(
        (
            b"\x06",
            write_long(body.epoch),
            write_long(body.chunks),
            write_long(body.objects),
            write_string(body.resource_version),
            write_string(body.since),
        )
    )


class WatchEventWriter:
    """Encodes the records of one stream: same key (so one partition keeps its order), headers
    naming the target and scope (so consumers can filter without decoding).

    The envelope's seven strings are the same on every record of a stream, so their Avro bytes
    are computed once; a record is that prefix, the timestamp and the body.
    """

    __slots__ = ("_codec", "_head", "_last_ms", "_prefix", "headers", "key")

    def __init__(self, head: StreamHead) -> None:
        self._codec = codec(WATCH_EVENT)
        stream = head.stream
        self.key = stream_key(head.route, stream.group_resource)
        self.headers = (
            self._codec.header,
            ("target", stream.target.encode()),
            ("scope", stream.scope.encode()),
        )
        self._head = head
        # the envelope's fields, in schema order
        envelope = (
            head.route,
            stream.cluster,
            stream.target,
            stream.group,
            stream.version,
            stream.resource,
            stream.scope,
        )
        self._prefix = (
            b"".join(write_string(text) for text in envelope)
            if self._codec.header[1] == HAND_WRITTEN
            else None
        )
        # the records of one batch are mostly stamped in the same millisecond
        self._last_ms: tuple[int, bytes] = (0, write_long(0))

    def encode(self, body: Body, observed_at_ms: int) -> bytes:
        """The record value: hand-written for the version above, else through fastavro."""
        if self._prefix is None:
            return self.encode_generic(body, observed_at_ms)
        last_ms, stamp = self._last_ms
        if observed_at_ms != last_ms:
            stamp = write_long(observed_at_ms)
            self._last_ms = (observed_at_ms, stamp)
        return b"".join((self._prefix, stamp, encode_body(body)))

    def encode_live(self, fields: LiveFields, observed_at_ms: int) -> bytes:
        """`encode(LiveEvent(*fields), observed_at_ms)`, without building the `LiveEvent`."""
        if self._prefix is None:
            return self.encode_generic(LiveEvent(*fields), observed_at_ms)
        last_ms, stamp = self._last_ms
        if observed_at_ms != last_ms:
            stamp = write_long(observed_at_ms)
            self._last_ms = (observed_at_ms, stamp)
        # the identity's four strings are short: their one-byte lengths go in with them, in one
        # list, rather than a call per string (a longer one raises IndexError: the general path)
        event_type, namespace, name, uid, resource_version, labels, deleting, obj = fields
        ns, nm, ui, rv = namespace.encode(), name.encode(), uid.encode(), resource_version.encode()
        lengths = _ONE_BYTE_LENGTHS
        try:
            parts = [
                self._prefix,
                stamp,
                b"\x00",
                _EVENT_TYPES[event_type],
                lengths[len(ns)],
                ns,
                lengths[len(nm)],
                nm,
                lengths[len(ui)],
                ui,
                lengths[len(rv)],
                rv,
            ]
        except IndexError:
            parts = [self._prefix, stamp]
            _live_parts(fields, parts)
            return b"".join(parts)
        _live_rest(labels, deleting, obj, parts)
        return b"".join(parts)

    def encode_generic(self, body: Body, observed_at_ms: int) -> bytes:
        """The record value through fastavro and the schema file (the reference `encode` matches)."""
        return self._codec.encode(WatchRecord.of(self._head, observed_at_ms, body).to_avro())

    def record(self, body: Body, observed_at_ms: int) -> PendingRecord:
        return PendingRecord(self.encode(body, observed_at_ms), self.key, self.headers)

    def live_record(self, fields: LiveFields, observed_at_ms: int) -> PendingRecord:
        """`record(LiveEvent(*fields), observed_at_ms)`: the record the watch writes per event."""
        return PendingRecord(self.encode_live(fields, observed_at_ms), self.key, self.headers)


@dataclass(frozen=True, slots=True)
class WatchRecord(AvroRecord):
    """One decoded watch-events record and where it came from."""

    partition: int
    offset: int
    head: StreamHead
    observed_at_ms: int
    body: Body

    avro_fields = {
        "partition": Wire(local=True),
        "offset": Wire(local=True),
        "head": Wire(spread=True),
    }

    @classmethod
    def of(cls, head: StreamHead, observed_at_ms: int, body: Body) -> WatchRecord:
        """A record of `head`'s stream as written (a record read back also has its log position)."""
        return cls(0, 0, head, observed_at_ms, body)

    @property
    def stream(self) -> StreamId:
        return self.head.stream

    @property
    def kind(self) -> StrEnum:
        return self.body.kind

    @property
    def is_live(self) -> bool:
        return isinstance(self.body, LiveEvent)


def decode_watch_event(record: Record) -> WatchRecord:
    """Decode a watch-events record; raises `pipeline.codec.DecodeError` when it cannot."""
    data = codec(WATCH_EVENT).decode(record.value, record.header(SCHEMA_HEADER))
    return WatchRecord.from_avro(data, partition=record.partition, offset=record.offset)
