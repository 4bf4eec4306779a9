"""The custom resources as the configuration streams see them, kept in memory.

The controller's streams are ordinary `WatchStream`s (snapshot, resume, backoff, 410 handling,
the LIST fallback) whose appender is this store instead of the log: what a stream would write as
watch events becomes the current set of objects of its kind. A kind counts as known only once
its first snapshot is complete, so a partial view is never compiled (it would drop targets).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, DecodeError, codec
from pipeline.customresources.objects import CustomResource, CustomResourceError, Kind, parse_object
from pipeline.log.api import PendingRecord

__all__ = ["ObjectStore"]

logger = logging.getLogger(__name__)

_Key = tuple[str, str]


class ObjectStore:
    """An `Appender` for the config streams: `topic` is the kind's plural name."""

    def __init__(self) -> None:
        self._objects: dict[Kind, dict[_Key, CustomResource]] = {kind: {} for kind in Kind}
        self._snapshot: dict[Kind, dict[_Key, CustomResource]] = {}
        self._complete: set[Kind] = set()
        self.changed = asyncio.Event()
        self.revision = 0

    @property
    def complete(self) -> bool:
        """Every kind has been listed once."""
        return self._complete == set(Kind)

    def objects(self) -> list[CustomResource]:
        return [obj for by_key in self._objects.values() for obj in by_key.values()]

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> object:
        kind = next((k for k in Kind if k.plural == topic), None)
        if kind is None:
            return None  # the streams' cursor records: the cursors stay in this process
        for record in records:
            try:
                data = codec(WATCH_EVENT).decode(record.value, dict(record.headers).get(SCHEMA_HEADER))
            except DecodeError as exc:
                logger.error("config stream %s: undecodable record: %s", topic, exc)
                continue
            self._apply(kind, *data["body"])
        return None

    def _apply(self, kind: Kind, body_kind: str, body: dict[str, object]) -> None:
        name = body_kind.rsplit(".", 1)[-1]
        if name == "SnapshotBegin":
            self._snapshot[kind] = {}
        elif name == "SnapshotChunk":
            target = self._snapshot.setdefault(kind, {})
            for item in body["objects"]:  # type: ignore[attr-defined]
                parsed = self._parse(kind, item["object"])
                if parsed is not None:
                    target[(parsed.ref.namespace, parsed.ref.name)] = parsed
        elif name == "SnapshotEnd":
            self._objects[kind] = self._snapshot.pop(kind, {})
            self._complete.add(kind)
            self._changed()
        elif name == "LiveEvent":
            key = (str(body["namespace"]), str(body["name"]))
            if body["type"] == "DELETED" or body["deleting"]:
                self._objects[kind].pop(key, None)
            else:
                parsed = self._parse(kind, body["object"])
                if parsed is None:
                    self._objects[kind].pop(key, None)
                else:
                    self._objects[kind][key] = parsed
            self._changed()

    def _changed(self) -> None:
        self.revision += 1
        self.changed.set()

    @staticmethod
    def _parse(kind: Kind, payload: object) -> CustomResource | None:
        try:
            return parse_object(json.loads(payload))  # type: ignore[arg-type]
        except (ValueError, CustomResourceError) as exc:
            logger.error("config stream %s: unreadable object: %s", kind.plural, exc)
            return None
