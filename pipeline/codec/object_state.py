"""`<prefix>.object-state` records: the current version of every mirrored object, keyed per object.

The key names the object within its target (`target/group/resource/namespace/name`, each part
percent-encoded so a `/` in a target name cannot shift the others, empty parts kept); the value
is the object as the commit worker last committed it, or no value at all (a tombstone) once the
object was removed from the branch, so compaction keeps exactly the current world.

A rebuild decodes every current object of a target, so `decode_state` reads the current schema
version (`HAND_WRITTEN`) straight from the bytes into an `ObjectState` (about twice as fast as
fastavro's dict and `from_avro`); other versions go through the codec.
`tests/unit/test_codec_formats.py` checks both paths against fastavro on records drawn from the
schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote

from pipeline.codec import OBJECT_STATE, SCHEMA_HEADER, DecodeError, codec
from pipeline.codec.avro_binary import (
    read_bytes,
    read_long,
    read_whole,
    write_bytes,
    write_long,
    write_string,
)
from pipeline.codec.binding import AvroRecord
from pipeline.codec.branch_work import ActorKind, Outcome, WorkAuthor
from pipeline.log.api import PendingRecord, Record

__all__ = [
    "HAND_WRITTEN",
    "ObjectKey",
    "ObjectState",
    "decode_state",
    "decode_state_v2",
    "encode_state_v2",
    "state_record",
    "target_prefix",
    "tombstone_record",
]

#: The schema header of the version `decode_state_v2` reads.
HAND_WRITTEN: Final = b"object_state/2"

KEY_SEPARATOR = "/"
# Parts made only of these need no percent-encoding (every Kubernetes name, namespace and group).
_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")
# A whole key whose parts are all plain: joined as they are (one match instead of five).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._~/-]*")
KEY_PARTS = 5


def _quote(part: str) -> str:
    return part if _PLAIN.fullmatch(part) else quote(part, safe="")


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """Which object of which target a record is about."""

    target: str
    group: str
    resource: str
    namespace: str
    name: str

    def encode(self) -> bytes:
        parts = (self.target, self.group, self.resource, self.namespace, self.name)
        joined = KEY_SEPARATOR.join(parts)
        if _PLAIN_KEY.fullmatch(joined) and joined.count(KEY_SEPARATOR) == KEY_PARTS - 1:
            return joined.encode()
        return KEY_SEPARATOR.join(_quote(p) for p in parts).encode()

    @classmethod
    def decode(cls, key: bytes | None) -> ObjectKey:
        """Parse a record key; raises `DecodeError` for anything that is not five components."""
        if key is None:
            raise DecodeError("object_state: record has no key")
        parts = key.decode("utf-8", "replace").split(KEY_SEPARATOR)
        if len(parts) != KEY_PARTS:
            raise DecodeError(f"object_state: key {key!r} is not target/group/resource/namespace/name")
        return cls(*(unquote(p) for p in parts))


def target_prefix(target: str) -> bytes:
    """The key prefix every object of `target` shares (a first read of one target filters on it)."""
    return f"{_quote(target)}{KEY_SEPARATOR}".encode()


@dataclass(frozen=True, slots=True)
class ObjectState(AvroRecord):
    """One object as last committed: content, version, author and the work record that produced it.

    It names an object (`key`), not the watch stream that delivered it: the scope that stream
    watched is not part of the record, so it carries no `StreamId`.
    """

    target: str
    provider: str
    branch: str
    path: str
    cluster: str
    group: str
    version: str
    resource: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    object_json: bytes
    sealed: bool
    # the bytes committed to Git (b"" when sealed: then object_json is the document)
    document: bytes
    author: WorkAuthor
    partition: int
    offset: int
    committed_at_ms: int

    avro_fields = {"object_json": "object", "partition": "source.partition", "offset": "source.offset"}

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.target, self.group, self.resource, self.namespace, self.name)


def state_record(state: ObjectState, key: ObjectKey | None = None) -> PendingRecord:
    """The record that makes `state` the current version of its object (`key`: its key, when
    the caller has it already)."""
    named = state.key if key is None else key
    return PendingRecord(encode_state_v2(state), key=named.encode(), headers=(_STATE_HEADER,))


def encode_state_v2(state: ObjectState) -> bytes:
    """`state` as an `object_state/2` payload, written straight from the dataclass.

    A first sync writes one state per object: fastavro's writer, with the dict `to_avro` builds
    for it, was most of that cost. The bytes are fastavro's (`tests/unit/test_codec_formats.py`).
    """
    author = state.author
    return b"".join(
        (
            write_string(state.target),
            write_string(state.provider),
            write_string(state.branch),
            write_string(state.path),
            write_string(state.cluster),
            write_string(state.group),
            write_string(state.version),
            write_string(state.resource),
            write_string(state.namespace),
            write_string(state.name),
            write_string(state.uid),
            write_string(state.resource_version),
            write_bytes(state.object_json),
            b"\x01" if state.sealed else b"\x00",
            write_bytes(state.document),
            _OUTCOME_INDEXES[author.outcome],
            write_string(author.username),
            write_string(author.display_name),
            write_string(author.email),
            write_string(author.tier),
            write_string(author.actor_kind),
            write_long(author.event_time_ms),
            write_long(state.partition),
            write_long(state.offset),
            write_long(state.committed_at_ms),
        )
    )


def tombstone_record(key: ObjectKey) -> PendingRecord:
    """The record that removes an object: no value, so compaction eventually drops the key."""
    return PendingRecord(None, key=key.encode())


def decode_state(record: Record) -> ObjectState:
    """Decode a non-tombstone object-state record; raises `DecodeError`."""
    header = record.header(SCHEMA_HEADER)
    if header == HAND_WRITTEN and record.value is not None:
        state = decode_state_v2(record.value)
    else:
        state = ObjectState.from_avro(codec(OBJECT_STATE).decode(record.value, header))
    if state.key.encode() != record.key:
        raise DecodeError(f"object_state: key {record.key!r} does not name the object in the value")
    return state


# -- the hand-written decoder --------------------------------------------------------------------
# The twelve strings from `target` to `resourceVersion`, in schema order (ObjectState's too).
_LEADING_STRINGS: Final = 12
# username, displayName, email, tier, actorKind
_AUTHOR_STRINGS: Final = 5
_OUTCOMES: Final = tuple(Outcome)
_ACTOR_KINDS: Final = {kind.value: kind for kind in ActorKind}
_BOOLEANS: Final = {0: False, 1: True}
_OUTCOME_INDEXES: Final = {outcome: write_long(index) for index, outcome in enumerate(_OUTCOMES)}
_STATE_HEADER: Final = (SCHEMA_HEADER, HAND_WRITTEN)


def _strings(data: bytes, pos: int, count: int, into: list[str]) -> int:
    """Read `count` Avro strings into `into`; returns the position after them.

    A length byte with bit 0 or bit 7 clear is a length of 0..63 in one byte: read inline (most
    strings here); anything else takes the general path.
    """
    for _ in range(count):
        size = data[pos]
        if size & 0x81:
            raw, pos = read_bytes(data, pos, OBJECT_STATE)
            into.append(raw.decode())
        else:
            pos += 1
            end = pos + (size >> 1)
            if end > len(data):
                raise DecodeError(f"{OBJECT_STATE}: a string runs past the end of the record")
            into.append(data[pos:end].decode())
            pos = end
    return pos


def decode_state_v2(data: bytes) -> ObjectState:
    """An `object_state/2` payload read straight into an `ObjectState`.

    Refuses what fastavro refuses (`DecodeError`: short or corrupt data, an unknown enum symbol,
    a boolean byte other than 0 or 1, trailing bytes) and otherwise yields what `from_avro` does.
    """
    return read_whole(data, OBJECT_STATE, _read_state_v2)


def _read_state_v2(data: bytes) -> tuple[ObjectState, int]:
    leading: list[str] = []
    pos = _strings(data, 0, _LEADING_STRINGS, leading)
    object_json, pos = read_bytes(data, pos, OBJECT_STATE)
    sealed = _BOOLEANS.get(data[pos])
    if sealed is None:
        raise DecodeError(f"{OBJECT_STATE}: boolean byte {data[pos]:#x}")
    document, pos = read_bytes(data, pos + 1, OBJECT_STATE)
    outcome, pos = read_long(data, pos, OBJECT_STATE)
    if not 0 <= outcome < len(_OUTCOMES):
        raise DecodeError(f"{OBJECT_STATE}: author outcome index {outcome}")
    author: list[str] = []
    pos = _strings(data, pos, _AUTHOR_STRINGS, author)
    event_time_ms, pos = read_long(data, pos, OBJECT_STATE)
    partition, pos = read_long(data, pos, OBJECT_STATE)
    offset, pos = read_long(data, pos, OBJECT_STATE)
    committed_at_ms, pos = read_long(data, pos, OBJECT_STATE)
    target, provider, branch, path, cluster, group, version, resource, namespace, name, uid, rv = leading
    username, display_name, email, tier, actor_name = author
    actor_kind = _ACTOR_KINDS.get(actor_name)
    if actor_kind is None:
        raise DecodeError(f"{OBJECT_STATE}: author actor kind {actor_name!r}")
    state = ObjectState(
        target,
        provider,
        branch,
        path,
        cluster,
        group,
        version,
        resource,
        namespace,
        name,
        uid,
        rv,
        object_json,
        sealed,
        document,
        WorkAuthor(_OUTCOMES[outcome], username, display_name, email, tier, actor_kind, event_time_ms),
        partition,
        offset,
        committed_at_ms,
    )
    return state, pos
