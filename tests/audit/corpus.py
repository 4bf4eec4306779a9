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
