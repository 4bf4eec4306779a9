"""The most expensive requests the default limits allow, for the health test and the benchmark.

Two shapes: the most events a request may carry, padded up to the body limit (decoding and the
accept gate dominate), and collection deletes whose responses list as many uids as fit (the uid
sets and their Avro encoding dominate).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pipeline.config import AuditSettings


def _event(index: int, verb: str, resource: str, now: str) -> dict[str, Any]:
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "RequestResponse",
        "auditID": f"00000000-0000-0000-0000-{index:012d}",
        "stage": "ResponseComplete",
        "requestURI": f"/api/v1/namespaces/team-a/{resource}/o{index}",
        "verb": verb,
        "user": {"username": f"user-{index % 50}@example.com"},
        "objectRef": {
            "resource": resource,
            "namespace": "team-a",
            "name": f"o{index}",
            "uid": f"uid-{index}",
            "apiVersion": "v1",
        },
        "responseStatus": {"code": 200},
        "stageTimestamp": now,
    }


def _list(items: list[dict[str, Any]]) -> bytes:
    return json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items}).encode()


def worst_events_body(audit: AuditSettings | None = None) -> bytes:
    """`max_events_per_request` configmap updates, padded so the body just fits `max_body_bytes`."""
    limits = audit or AuditSettings()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    events = [_event(i, "update", "configmaps", now) for i in range(limits.max_events_per_request)]

    def pad(length: int) -> bytes:
        for i, event in enumerate(events):
            metadata = {"name": f"o{i}", "resourceVersion": str(i + 2)}
            data = {"k": "v" * length}
            event["requestObject"] = {"kind": "ConfigMap", "metadata": {"name": f"o{i}"}, "data": data}
            event["responseObject"] = {"kind": "ConfigMap", "metadata": metadata}
        return _list(events)

    unpadded = len(pad(0))
    if unpadded > limits.max_body_bytes:
        raise ValueError("max_events_per_request events do not fit max_body_bytes")
    return pad((limits.max_body_bytes - unpadded) // len(events))


def worst_uids_body(audit: AuditSettings | None = None) -> bytes:
    """Collection deletes, each listing `collection_uid_cap` uids, as many as fit the body limit."""
    limits = audit or AuditSettings()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    events: list[dict[str, Any]] = []
    body = _list(events)
    index = 0
    while True:
        event = _event(index, "deletecollection", "configmaps", now)
        event["requestURI"] = "/api/v1/namespaces/team-a/configmaps?labelSelector=app%3Dx"
        del event["objectRef"]["name"], event["objectRef"]["uid"]
        uids = [{"metadata": {"uid": f"u{index}-{n}"}} for n in range(limits.collection_uid_cap)]
        event["responseObject"] = {"kind": "ConfigMapList", "items": uids}
        candidate = _list([*events, event])
        if len(candidate) > limits.max_body_bytes or len(events) >= limits.max_events_per_request:
            break
        events.append(event)
        body = candidate
        index += 1
    if not events:
        raise ValueError("not even one collection delete fits the body limit")
    return body
