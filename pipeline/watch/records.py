"""The records one watch stream writes, kept under the topic's message size limit.

The record format itself (fields, variants, key and headers) is `pipeline.codec.watch_event`'s;
this module decides sizes: whether a record fits and how a snapshot is cut into chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.codec.watch_event import (
    Body,
    LiveEvent,
    LiveFields,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotObject,
    StreamHead,
    WatchEventWriter,
)
from pipeline.log.api import PendingRecord, max_value_bytes
from pipeline.watch.resolve import StreamSpec

__all__ = ["RecordBuilder", "live_event", "live_fields", "snapshot_object", "stream_head"]

# Room for the envelope, key and headers around the objects of a chunk.
_ENVELOPE_BYTES = 4096


def _text(value: Any) -> str:
    """A metadata string as the record holds it: missing or empty is ""."""
    return value if type(value) is str else str(value or "")


def live_fields(event_type: str, meta: dict[str, Any], deleting: bool, payload: bytes) -> LiveFields:
    """The live event of an object with metadata `meta`, serialised as `payload`, as the tuple
    of its fields (what the watch writes per event, `WatchEventWriter.live_record`); the strings
    are read as `_text` reads them, inline."""
    get = meta.get
    namespace, name, uid, version, labels = (
        get("namespace"),
        get("name"),
        get("uid"),
        get("resourceVersion"),
        get("labels"),
    )
    return (
        event_type,
        namespace if type(namespace) is str else str(namespace or ""),
        name if type(name) is str else str(name or ""),
        uid if type(uid) is str else str(uid or ""),
        version if type(version) is str else str(version or ""),
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) and labels else {},
        deleting,
        payload,
    )


def live_event(event_type: str, meta: dict[str, Any], deleting: bool, payload: bytes) -> LiveEvent:
    """The live event of an object with metadata `meta`, serialised as `payload`."""
    return LiveEvent(*live_fields(event_type, meta, deleting, payload))


def snapshot_object(meta: dict[str, Any], payload: bytes) -> SnapshotObject:
    """The snapshot entry of an object with metadata `meta`, serialised as `payload`."""
    return SnapshotObject(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        str(meta.get("resourceVersion") or ""),
        payload,
    )


def stream_head(spec: StreamSpec) -> StreamHead:
    """The envelope fields of every record of the stream `spec` names."""
    return StreamHead(spec.route, spec.stream)


class RecordBuilder:
    """Builds the records of one stream; `max_record_bytes` is the topic's message size limit."""

    __slots__ = ("_clock_ms", "_max_value_bytes", "_writer", "max_record_bytes")

    def __init__(self, spec: StreamSpec, max_record_bytes: int, clock_ms: Callable[[], int]) -> None:
        self._writer = WatchEventWriter(stream_head(spec))
        self._clock_ms = clock_ms
        self.max_record_bytes = max_record_bytes
        # Every record of the stream has the same key and headers, so the same value limit.
        self._max_value_bytes = max_value_bytes(max_record_bytes, self._writer.key, self._writer.headers)

    def _record(self, body: Body) -> PendingRecord:
        return self._writer.record(body, self._clock_ms())

    def fits(self, record: PendingRecord) -> bool:
        """Whether the log takes `record` (`pipeline.log.api.RECORD_OVERHEAD_BYTES` included)."""
        if record.key is self._writer.key and record.headers is self._writer.headers:
            return len(record.value or b"") <= self._max_value_bytes
        return len(record.value or b"") <= max_value_bytes(self.max_record_bytes, record.key, record.headers)

    def live(
        self,
        event_type: str,
        meta: dict[str, Any],
        deleting: bool,
        payload: bytes,
    ) -> PendingRecord:
        return self._writer.live_record(live_fields(event_type, meta, deleting, payload), self._clock_ms())

    def begin(self, epoch: int, resource_version: str = "") -> PendingRecord:
        return self._record(SnapshotBegin(epoch, resource_version))

    def end(
        self, epoch: int, chunks: int, objects: int, resource_version: str, since: str = ""
    ) -> PendingRecord:
        return self._record(SnapshotEnd(epoch, chunks, objects, resource_version, since))

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
        record = self._record(SnapshotChunk(epoch, first_seq, tuple(objects), since))
        if self.fits(record) or len(objects) <= 1:
            return [record]
        half = len(objects) // 2
        head = self.chunks(epoch, first_seq, objects[:half], since)
        return head + self.chunks(epoch, first_seq + len(head), objects[half:], since)
