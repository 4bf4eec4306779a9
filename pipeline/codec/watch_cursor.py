"""The `watch_cursor` record (`schemas/watch_cursor.avsc`): its one owner.

Where a watch stream resumes, on the compacted `watch-cursors` topic keyed by the stream's cursor
key (a tombstone forgets it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeline.codec import WATCH_CURSOR, codec
from pipeline.codec.binding import AvroRecord, Wire
from pipeline.codec.stream_id import StreamId
from pipeline.log.api import PendingRecord

__all__ = ["Cursor", "decode_cursor", "encode_cursor"]


@dataclass(frozen=True, slots=True)
class Cursor(AvroRecord):
    """Where a stream resumes: the newest acknowledged resourceVersion and its snapshot epoch.

    A stream whose first snapshot has not completed has no resourceVersion to resume from, only
    its `baseline_version`: the collection's version when mirroring began. Whoever snapshots it
    next attributes what changed after that, instead of taking it into a committer's baseline.
    """

    key: str
    stream: StreamId
    resource_version: str
    epoch: int
    updated_at_ms: int
    baseline_version: str = ""

    avro_fields = {"key": Wire(local=True), "stream": Wire(spread=True)}


def encode_cursor(cursor: Cursor) -> PendingRecord:
    return codec(WATCH_CURSOR).record(cursor.to_avro(), key=cursor.key.encode())


def decode_cursor(key: bytes | None, value: bytes | None, schema_header: bytes | None) -> Cursor:
    """Decode a cursor record; raises `pipeline.codec.DecodeError` for anything unreadable.

    A record without a key (never written so) is named by its stream, as the watch stage keys it.
    """
    data = codec(WATCH_CURSOR).decode(value, schema_header)
    if key:
        return Cursor.from_avro(data, key=key.decode("utf-8", "replace"))
    cursor = Cursor.from_avro(data, key="")
    return dataclasses.replace(cursor, key=cursor.stream.cursor_key)
