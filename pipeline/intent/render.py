"""Whether an edit renders as the live change: kustomize's output before and after, compared.

An edit to a file that kustomize renders is only right if `kustomize build` of the folder changes
exactly as the cluster changed: the changed object differs by the same fields and values as the
live object did, and no other object moves. The commit worker runs the real kustomize on both
trees; this module decides, from the two outputs, whether to commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from pipeline.intent.documents import IntentRefusal, RefusalReason
from pipeline.intent.edit import Change, ChangeKind, changes, holds, user_changes
from pipeline.intent.homes import ObjectKey

__all__ = ["render_verdict", "rendered_objects"]


def rendered_objects(stream: str) -> dict[ObjectKey, dict[str, Any]]:
    """`kustomize build` output as objects by key."""
    objects: dict[ObjectKey, dict[str, Any]] = {}
    for value in yaml.safe_load_all(stream):
        if not isinstance(value, dict):
            continue
        metadata = value.get("metadata") or {}
        key = ObjectKey(
            str(value.get("apiVersion", "")).rpartition("/")[0],
            str(value.get("kind", "")),
            str(metadata.get("namespace") or ""),
            str(metadata.get("name", "")),
        )
        objects[key] = value
    return objects


def _comparable(edits: list[Change]) -> set[tuple[str, str, str]]:
    return {(e.kind, json.dumps(e.path), json.dumps(e.value, sort_keys=True, default=str)) for e in edits}


def _describe(key: ObjectKey) -> str:
    return f"{key.kind} {key.namespace}/{key.name}" if key.namespace else f"{key.kind} {key.name}"


def _mismatch(detail: str) -> IntentRefusal:
    return IntentRefusal(RefusalReason.RENDER_MISMATCH, detail)


def render_verdict(
    before: Mapping[ObjectKey, Any],
    after: Mapping[ObjectKey, Any],
    key: ObjectKey,
    live: tuple[Any, Any],
) -> IntentRefusal | None:
    """None when the render moved exactly as `live` (the object before and after; None for absent)
    did for `key`, else the refusal that says what moved."""
    live_before, live_after = live
    moved = sorted(k for k in set(before) | set(after) if k != key and before.get(k) != after.get(k))
    if moved:
        return _mismatch(f"the edit also changes the rendering of {', '.join(map(_describe, moved[:3]))}")
    if live_after is None:
        return _mismatch(f"{_describe(key)} still renders") if key in after else None
    if key not in after:
        return _mismatch(f"{_describe(key)} does not render after the edit")
    if live_before is None or key not in before:
        conflicts = [
            e
            for e in changes(live_after, after[key])
            if e.kind is ChangeKind.SET and holds(live_after, e.path)
        ]
        if conflicts:
            return _mismatch(f"{_describe(key)} renders {_path(conflicts[0])} other than the cluster has it")
        return None
    rendered = _comparable(user_changes(before[key], after[key]))
    if rendered != _comparable(user_changes(live_before, live_after)):
        return _mismatch(f"{_describe(key)} renders a different change than the cluster made")
    return None


def _path(edit: Change) -> str:
    return ".".join(str(k) for k in edit.path)
