"""The `watch_cursor` record (`schemas/watch_cursor.avsc`): its one owner.

Where a watch stream resumes, on the compacted `watch-cursors` topic keyed by the stream's cursor
key (a tombstone forgets it).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.codec import WATCH_CURSOR, codec
from pipeline.log.api import PendingRecord

__all__ = ["Cursor", "decode_cursor", "encode_cursor"]


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
    return codec(WATCH_CURSOR).record(
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
        },
        key=cursor.key.encode(),
    )


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
