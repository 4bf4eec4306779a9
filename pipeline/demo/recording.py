"""Loads the bundled recording and turns its steps into watch records and audit EventLists."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from pipeline.codec.stream_id import StreamId
from pipeline.codec.watch_event import (
    Body,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    StreamHead,
    WatchEventWriter,
)
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.log.api import PendingRecord
from pipeline.models import GroupResource
from pipeline.watch.records import live_event, snapshot_object

RECORDING = Path(__file__).with_name("recording.yaml")
TIMESTAMP_TOKEN = "<ts>"

# apiVersion/kind of the recording's objects → group/resource (the demo has no API discovery)
_RESOURCES = {"ConfigMap": "configmaps", "Deployment": "deployments", "Secret": "secrets"}


@dataclass(frozen=True, slots=True)
class WatchStep:
    event_type: str
    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AuditStep:
    event_list: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Recording:
    cluster: str
    namespace: str
    snapshot_rv: str
    snapshot: list[dict[str, Any]]
    steps: list[WatchStep | AuditStep]


def _stamp(node: Any, now: str) -> Any:
    if node == TIMESTAMP_TOKEN:
        return now
    if isinstance(node, dict):
        return {key: _stamp(value, now) for key, value in node.items()}
    if isinstance(node, list):
        return [_stamp(value, now) for value in node]
    return node


def load_recording(path: Path = RECORDING) -> Recording:
    """Parse the recording, giving every `<ts>` the current time so facts fall inside the TTL."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raw = _stamp(yaml.safe_load(path.read_text(encoding="utf-8")), now)
    steps: list[WatchStep | AuditStep] = []
    for step in raw["steps"]:
        if "watch" in step:
            steps.append(WatchStep(step["watch"]["type"], step["watch"]["object"]))
        else:
            items = [
                {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", **e}
                for e in step["audit"]
            ]
            steps.append(AuditStep({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items}))
    snapshot = raw["snapshot"]
    return Recording(
        raw["cluster"], raw["namespace"], snapshot["resourceVersion"], snapshot["objects"], steps
    )


def group_resource_of(obj: dict[str, Any]) -> tuple[GroupResource, str]:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    return GroupResource(group, _RESOURCES[obj["kind"]]), version


class WatchRecordBuilder:
    """Builds watch-events records for one target, as the watch stage writes them."""

    def __init__(self, route: str, cluster: str, target: str, scope: str) -> None:
        self._route = route
        self._cluster = cluster
        self._target = target
        self._scope = scope

    def _record(self, gr: GroupResource, version: str, body: Body) -> PendingRecord:
        stream = StreamId(self._target, self._cluster, gr.group, version, gr.resource, self._scope)
        head = StreamHead(self._route, stream)
        return WatchEventWriter(head).record(body, int(time.time() * 1000))

    def snapshot(
        self,
        gr: GroupResource,
        version: str,
        epoch: int,
        rv: str,
        objects: list[dict[str, Any]],
        since: str = "",
    ) -> list[PendingRecord]:
        entries = tuple(snapshot_object(o["metadata"], sanitized_json(sanitize(o))) for o in objects)
        chunks = [entries] if entries else []
        return [
            self._record(gr, version, SnapshotBegin(epoch, rv)),
            *(
                self._record(gr, version, SnapshotChunk(epoch, seq, chunk, since))
                for seq, chunk in enumerate(chunks)
            ),
            self._record(gr, version, SnapshotEnd(epoch, len(chunks), len(entries), rv, since)),
        ]

    def live(self, step: WatchStep, payload: bytes | None = None) -> PendingRecord:
        """The live event of a step; `payload` replaces the sanitized JSON (a sealed Secret)."""
        gr, version = group_resource_of(step.obj)
        meta = step.obj["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        object_json = sanitized_json(sanitize(step.obj)) if payload is None else payload
        return self._record(gr, version, live_event(step.event_type, meta, deleting, object_json))
