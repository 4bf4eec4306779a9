"""Loading the recorded audit events of `tests/corpus/` with their tokens made concrete.

The mutation-lab recordings are normalised to tokens (`<uid-1>`, `<rv-2>`, `<ns-1>`, `<ts>`); the
corpus README says to replace each with a concrete value of the right shape before replaying, with
`<ts>` a recent UTC time with six fractional digits so facts land inside the TTL.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.support.corpus import CORPUS

WEBHOOK_FILES = sorted((CORPUS / "webhook").glob("*.yaml"))
MUTATIONLAB_AUDIT_FILES = sorted((CORPUS / "mutationlab").glob("*/*/audit.*.yaml"))


def recording_id(path: Path) -> str:
    """`scenario/file.yaml`: how tests name a recording."""
    return f"{path.parent.name}/{path.name}"


ADMIN = "system:admin"
FLUX = "system:serviceaccount:flux-system:kustomize-controller"
# What each recording must publish, read off the recording by hand (the oracle is not the reducer):
# (group/resource, object name, author, verb), or nothing for a write the apiserver did not persist.
PUBLISHED: dict[str, list[tuple[str, str, str, str]]] = {
    "webhook/aggregated-flunder-create-eventlist.yaml": [
        ("wardle.example.com/flunders", "aggregated-shallow-flunder", "jane@acme.com", "create")
    ],
    "webhook/config-deletecollection.yaml": [("configmaps", "", ADMIN, "deletecollection")],
    "webhook/config-update.yaml": [("configmaps", "test-config3", ADMIN, "patch")],
    "webhook/flux-secret-dryrun-patch-eventlist.yaml": [],  # ?dryRun=All: nothing persisted
    "webhook/flux-secret-persisted-patch-eventlist.yaml": [("secrets", "app-secret", FLUX, "patch")],
    "create-succeeds/audit.create.yaml": [("configmaps", "cm-a", ADMIN, "create")],
    "deletecollection/audit.deletecollection.yaml": [("configmaps", "", ADMIN, "deletecollection")],
    "dry-run-create/audit.create.yaml": [],  # ?dryRun=All
    "generate-name-create/audit.create.yaml": [("configmaps", "cm-gen-<rand-1>", ADMIN, "create")],
    "no-op-apply/audit.patch.yaml": [("configmaps", "cm-a", ADMIN, "patch")],
    "record-and-reject/audit.create.yaml": [],  # answered 403
    "server-side-apply/audit.patch.yaml": [("configmaps", "cm-a", ADMIN, "patch")],
    "update/audit.update.yaml": [("configmaps", "cm-a", ADMIN, "update")],
    "aggregated-api-write/audit.create.yaml": [],  # the response carries no object metadata
}


_TOKEN = re.compile(r"<(uid|rv|ns|ts)(?:-(\d+))?>")


def token_value(kind: str, number: str | None, now: datetime) -> str:
    """The concrete value one token stands for (stable, so equal tokens stay equal)."""
    if kind == "uid":
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"corpus-uid-{number}"))
    if kind == "rv":
        return str(1000 + int(number or 0))
    if kind == "ns":
        return f"corpus-ns-{number}"
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_us(now: datetime) -> int:
    return int(now.timestamp()) * 1_000_000 + now.microsecond


def _replace_tokens(node: Any, moment: datetime) -> Any:
    if isinstance(node, str):
        return _TOKEN.sub(lambda m: token_value(m.group(1), m.group(2), moment), node)
    if isinstance(node, list):
        return [_replace_tokens(item, moment) for item in node]
    if isinstance(node, dict):
        return {key: _replace_tokens(value, moment) for key, value in node.items()}
    return node


def load_recording(path: Path, now: datetime | None = None) -> Any:
    """The YAML document at `path` with tokens replaced inside string values (types preserved)."""
    return _replace_tokens(yaml.safe_load(path.read_text()), now or datetime.now(UTC))


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def event_list(events: list[Any]) -> dict[str, Any]:
    return {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": events}


def as_event_list(document: Any) -> dict[str, Any]:
    """A single recorded Event wrapped into an EventList (EventLists are returned as they are)."""
    if document.get("kind") == "EventList":
        return dict(document)
    return event_list([document])


def to_json(document: Any) -> bytes:
    """JSON as the apiserver posts it (YAML timestamps rendered back to RFC 3339)."""
    return json.dumps(document, default=_json_default).encode()
