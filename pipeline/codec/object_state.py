"""`<prefix>.object-state` records: the current version of every mirrored object, keyed per object.

The key names the object within its target (`target/group/resource/namespace/name`, each part
percent-encoded so a `/` in a target name cannot shift the others, empty parts kept); the value
is the object as the commit worker last committed it, or no value at all (a tombstone) once the
object was removed from the branch, so compaction keeps exactly the current world.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from pipeline.codec import OBJECT_STATE, SCHEMA_HEADER, DecodeError, codec
from pipeline.codec.branch_work import WorkAuthor
from pipeline.log.api import Headers, PendingRecord, Record

__all__ = ["ObjectKey", "ObjectState", "decode_state", "state_record", "target_prefix", "tombstone_record"]

KEY_SEPARATOR = "/"
# Parts made only of these need no percent-encoding (every Kubernetes name, namespace and group).
_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")


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
        return KEY_SEPARATOR.join(_quote(p) for p in parts).encode()

    @classmethod
    def decode(cls, key: bytes | None) -> ObjectKey:
        """Parse a record key; raises `DecodeError` for anything that is not five components."""
        if key is None:
            raise DecodeError("object_state: record has no key")
        parts = key.decode("utf-8", "replace").split(KEY_SEPARATOR)
        if len(parts) != 5:
            raise DecodeError(f"object_state: key {key!r} is not target/group/resource/namespace/name")
        return cls(*(unquote(p) for p in parts))


def target_prefix(target: str) -> bytes:
    """The key prefix every object of `target` shares (a first read of one target filters on it)."""
    return f"{_quote(target)}{KEY_SEPARATOR}".encode()


@dataclass(frozen=True, slots=True)
class ObjectState:
    """One object as last committed: content, version, author and the work record that produced it."""

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

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.target, self.group, self.resource, self.namespace, self.name)

    def to_avro(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "provider": self.provider,
            "branch": self.branch,
            "path": self.path,
            "cluster": self.cluster,
            "group": self.group,
            "version": self.version,
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "object": self.object_json,
            "sealed": self.sealed,
            "document": self.document,
            "author": self.author.to_avro(),
            "source": {"partition": self.partition, "offset": self.offset},
            "committedAtMs": self.committed_at_ms,
        }

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> ObjectState:
        return cls(
            target=data["target"],
            provider=data["provider"],
            branch=data["branch"],
            path=data["path"],
            cluster=data["cluster"],
            group=data["group"],
            version=data["version"],
            resource=data["resource"],
            namespace=data["namespace"],
            name=data["name"],
            uid=data["uid"],
            resource_version=data["resourceVersion"],
            object_json=data["object"],
            sealed=data["sealed"],
            document=data["document"],
            author=WorkAuthor.from_avro(data["author"]),
            partition=data["source"]["partition"],
            offset=data["source"]["offset"],
            committed_at_ms=data["committedAtMs"],
        )


def _headers() -> Headers:
    return (codec(OBJECT_STATE).header,)


def state_record(state: ObjectState) -> PendingRecord:
    """The record that makes `state` the current version of its object."""
    value = codec(OBJECT_STATE).encode(state.to_avro())
    return PendingRecord(value, key=state.key.encode(), headers=_headers())


def tombstone_record(key: ObjectKey) -> PendingRecord:
    """The record that removes an object: no value, so compaction eventually drops the key."""
    return PendingRecord(None, key=key.encode())


def decode_state(record: Record) -> ObjectState:
    """Decode a non-tombstone object-state record; raises `DecodeError`."""
    state = ObjectState.from_avro(codec(OBJECT_STATE).decode(record.value, record.header(SCHEMA_HEADER)))
    if state.key.encode() != record.key:
        raise DecodeError(f"object_state: key {record.key!r} does not name the object in the value")
    return state
