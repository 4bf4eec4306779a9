"""Encodes what one watch stream writes: watch events, snapshot pieces and its cursor.

Every record of a stream has the same key (route + group/resource) so the log keeps the stream's
order in one partition; headers name the target and scope so consumers can filter without
decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.codec import WATCH_CURSOR, WATCH_EVENT, codec
from pipeline.log.api import PendingRecord, max_value_bytes
from pipeline.models import stream_key
from pipeline.watch.resolve import StreamSpec

__all__ = ["Cursor", "RecordBuilder", "SnapshotObject", "decode_cursor", "encode_cursor"]

_LIVE = "reverser.watch.LiveEvent"
_BEGIN = "reverser.watch.SnapshotBegin"
_CHUNK = "reverser.watch.SnapshotChunk"
_END = "reverser.watch.SnapshotEnd"

# Room for the envelope, key and headers around the objects of a chunk.
_ENVELOPE_BYTES = 4096
_PER_OBJECT_BYTES = 32


@dataclass(frozen=True, slots=True)
class SnapshotObject:
    """One object of a snapshot, already sanitized and serialised."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    payload: bytes

    @property
    def size_estimate(self) -> int:
        return (
            len(self.payload)
            + len(self.namespace)
            + len(self.name)
            + len(self.uid)
            + len(self.resource_version)
            + _PER_OBJECT_BYTES
        )

    def as_avro(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "object": self.payload,
        }


class RecordBuilder:
    """Builds the records of one stream; `max_record_bytes` is the topic's message size limit."""

    __slots__ = ("_base", "_clock_ms", "_codec", "_headers", "_key", "max_record_bytes")

    def __init__(self, spec: StreamSpec, max_record_bytes: int, clock_ms: Callable[[], int]) -> None:
        self._codec = codec(WATCH_EVENT)
        self._key = stream_key(spec.route, spec.group_resource)
        self._headers = (
            self._codec.header,
            ("target", spec.target.encode()),
            ("scope", spec.scope.encode()),
        )
        self._base = {
            "route": spec.route,
            "cluster": spec.cluster,
            "target": spec.target,
            "group": spec.group,
            "version": spec.version,
            "resource": spec.resource,
            "scope": spec.scope,
        }
        self._clock_ms = clock_ms
        self.max_record_bytes = max_record_bytes

    def _record(self, body: tuple[str, dict[str, Any]]) -> PendingRecord:
        value = self._codec.encode({**self._base, "observedAtMs": self._clock_ms(), "body": body})
        return PendingRecord(value, key=self._key, headers=self._headers)

    def fits(self, record: PendingRecord) -> bool:
        """Whether the log takes `record` (`pipeline.log.api.RECORD_OVERHEAD_BYTES` included)."""
        return len(record.value or b"") <= max_value_bytes(self.max_record_bytes, record.key, record.headers)

    def live(
        self,
        event_type: str,
        meta: dict[str, Any],
        deleting: bool,
        payload: bytes,
    ) -> PendingRecord:
        labels = meta.get("labels")
        return self._record(
            (
                _LIVE,
                {
                    "type": event_type,
                    "namespace": str(meta.get("namespace") or ""),
                    "name": str(meta.get("name") or ""),
                    "uid": str(meta.get("uid") or ""),
                    "resourceVersion": str(meta.get("resourceVersion") or ""),
                    "labels": {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
                    "deleting": deleting,
                    "object": payload,
                },
            )
        )

    def begin(self, epoch: int, resource_version: str = "") -> PendingRecord:
        return self._record((_BEGIN, {"epoch": epoch, "resourceVersion": resource_version}))

    def end(
        self, epoch: int, chunks: int, objects: int, resource_version: str, since: str = ""
    ) -> PendingRecord:
        return self._record(
            (
                _END,
                {
                    "epoch": epoch,
                    "chunks": chunks,
                    "objects": objects,
                    "resourceVersion": resource_version,
                    "since": since,
                },
            )
        )

    @property
    def chunk_budget(self) -> int:
        """Bytes of objects one chunk may carry before it is cut."""
        return max(self.max_record_bytes - _ENVELOPE_BYTES, 1)

    def chunks(
        self, epoch: int, first_seq: int, objects: list[SnapshotObject], since: str = ""
    ) -> list[PendingRecord]:
        """One chunk of `objects`, or several when the encoded record would be over the limit.

        `since` is the stream's cursor before the snapshot: the router attributes the objects that
        changed after it like live events (docs/watch.md, "Snapshots after a gap").
        """
        record = self._record(
            (
                _CHUNK,
                {"epoch": epoch, "seq": first_seq, "objects": [o.as_avro() for o in objects], "since": since},
            )
        )
        if self.fits(record) or len(objects) <= 1:
            return [record]
        half = len(objects) // 2
        head = self.chunks(epoch, first_seq, objects[:half], since)
        return head + self.chunks(epoch, first_seq + len(head), objects[half:], since)


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a stream resumes: the newest acknowledged resourceVersion and its snapshot epoch."""

    key: str
    target: str
    cluster: str
    group: str
    version: str
    resource: str
    scope: str
    resource_version: str
    epoch: int
    updated_at_ms: int


def encode_cursor(cursor: Cursor) -> PendingRecord:
    cursor_codec = codec(WATCH_CURSOR)
    value = cursor_codec.encode(
        {
            "target": cursor.target,
            "cluster": cursor.cluster,
            "group": cursor.group,
            "version": cursor.version,
            "resource": cursor.resource,
            "scope": cursor.scope,
            "resourceVersion": cursor.resource_version,
            "epoch": cursor.epoch,
            "updatedAtMs": cursor.updated_at_ms,
        }
    )
    return PendingRecord(value, key=cursor.key.encode(), headers=(cursor_codec.header,))


def decode_cursor(key: bytes | None, value: bytes | None, schema_header: bytes | None) -> Cursor:
    """Decode a cursor record; raises `pipeline.codec.DecodeError` for anything unreadable."""
    data = codec(WATCH_CURSOR).decode(value, schema_header)
    target, group, resource, scope = (
        str(data["target"]),
        str(data["group"]),
        str(data["resource"]),
        str(data["scope"]),
    )
    return Cursor(
        key=key.decode("utf-8", "replace") if key else f"{target}/{group}/{resource}/{scope}",
        target=target,
        cluster=str(data["cluster"]),
        group=group,
        version=str(data["version"]),
        resource=resource,
        scope=scope,
        resource_version=str(data["resourceVersion"]),
        epoch=int(data["epoch"]),
        updated_at_ms=int(data["updatedAtMs"]),
    )
