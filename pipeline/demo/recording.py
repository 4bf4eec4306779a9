"""Loads the bundled recording and turns its steps into watch records and audit EventLists."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from pipeline.codec import WATCH_EVENT, codec
from pipeline.log.api import PendingRecord
from pipeline.models import GroupResource, stream_key
from pipeline.watch.sanitize import sanitize, sanitized_json

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
        self._codec = codec(WATCH_EVENT)

    def _record(self, gr: GroupResource, version: str, body: tuple[str, dict[str, Any]]) -> PendingRecord:
        value = self._codec.encode(
            {
                "route": self._route,
                "cluster": self._cluster,
                "target": self._target,
                "group": gr.group,
                "version": version,
                "resource": gr.resource,
                "scope": self._scope,
                "observedAtMs": int(time.time() * 1000),
                "body": body,
            }
        )
        headers = (self._codec.header, ("target", self._target.encode()), ("scope", self._scope.encode()))
        return PendingRecord(value, key=stream_key(self._route, gr), headers=headers)

    def snapshot(
        self,
        gr: GroupResource,
        version: str,
        epoch: int,
        rv: str,
        objects: list[dict[str, Any]],
        since: str = "",
    ) -> list[PendingRecord]:
        entries = [
            {
                "namespace": o["metadata"].get("namespace", ""),
                "name": o["metadata"]["name"],
                "uid": o["metadata"]["uid"],
                "resourceVersion": o["metadata"]["resourceVersion"],
                "object": sanitized_json(sanitize(o)),
            }
            for o in objects
        ]
        chunks = [entries] if entries else []
        return [
            self._record(
                gr, version, ("reverser.watch.SnapshotBegin", {"epoch": epoch, "resourceVersion": rv})
            ),
            *(
                self._record(
                    gr,
                    version,
                    (
                        "reverser.watch.SnapshotChunk",
                        {"epoch": epoch, "seq": seq, "objects": chunk, "since": since},
                    ),
                )
                for seq, chunk in enumerate(chunks)
            ),
            self._record(
                gr,
                version,
                (
                    "reverser.watch.SnapshotEnd",
                    {
                        "epoch": epoch,
                        "chunks": len(chunks),
                        "objects": len(entries),
                        "resourceVersion": rv,
                        "since": since,
                    },
                ),
            ),
        ]

    def live(self, step: WatchStep, payload: bytes | None = None) -> PendingRecord:
        """The live event of a step; `payload` replaces the sanitized JSON (a sealed Secret)."""
        gr, version = group_resource_of(step.obj)
        meta = step.obj["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        return self._record(
            gr,
            version,
            (
                "reverser.watch.LiveEvent",
                {
                    "type": step.event_type,
                    "namespace": meta.get("namespace", ""),
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "resourceVersion": meta["resourceVersion"],
                    "labels": dict(meta.get("labels") or {}),
                    "deleting": deleting,
                    "object": sanitized_json(sanitize(step.obj)) if payload is None else payload,
                },
            ),
        )
