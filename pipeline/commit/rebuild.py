"""Rebuilding a target's folder on a branch from `<prefix>.object-state`: one reconciling commit per target.

The desired tree of a target is its current objects, rendered exactly as the commit worker
renders them; every object document already under the target's folder that is not desired is
removed, and nothing outside the folder is touched. So the same code starts a target on an empty
branch and repairs a branch that drifted (adds, updates and removes).

An object kept in a user's file (a document of a multi-document file, a file a kustomization lists)
is not the canonical file: each object also carries its `LiveChange` (from nothing known to the
stored object), so the rebuild, like the commit worker, writes it into its home document (only
the values that document holds move, nothing when they already match; a sealed object's SOPS
document is its placed file, whole) instead of a second copy at the canonical path
(`pipeline.commit.inplace.place`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from pipeline.codec.object_state import ObjectState
from pipeline.commit.inplace import LiveChange, live_object, placed_object, sealed_object
from pipeline.commit.layout import LayoutError, canonical_path, is_sensitive, normalize_target_path
from pipeline.commit.messages import ChangedObject
from pipeline.commit.plan import Files, Plan, Writes, documents
from pipeline.commit.yamlrender import RenderError, parse_object_json, render_object
from pipeline.config import TargetSettings
from pipeline.intent.homes import ObjectKey as HomeKey
from pipeline.operation import Operation
from pipeline.sealing import SealedDocument, SealedDocumentError, sensitive_set

__all__ = ["Desired", "desired_files", "reconcile_plan"]


@dataclass(slots=True)
class Desired:
    """A target's files as its object state says they must be, and the states that could not be used."""

    files: dict[str, tuple[bytes, ChangedObject]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    # per canonical path of `files`, the object as a change, placed where it lives (`place`)
    changes: dict[str, LiveChange] = field(default_factory=dict)


def desired_files(
    target: TargetSettings,
    states: Iterable[ObjectState],
    placeable: Callable[[ObjectState], bool] | None = None,
) -> Desired:
    """Path -> content for every current object of `target`, at the target's configured path.

    `placeable` says which objects may live elsewhere than their canonical path (a cheap test on
    the branch's home index and the target's placement): only their JSON is read, into the
    `LiveChange` the rebuild places (None: none may)."""
    folder = normalize_target_path(target.path)
    sensitive = sensitive_set(target.encryption.sensitive_resources) if target.encryption else frozenset()
    desired = Desired()
    sealed_types: dict[tuple[str, str], bool] = {}
    for state in states:
        kind = (state.group, state.resource)
        sealed = sealed_types.get(kind)
        if sealed is None:
            sealed = sealed_types[kind] = is_sensitive(state.group, state.resource, sensitive)
        if sealed != state.sealed:
            desired.refused.append(
                f"{_where(state)}: stored {'sealed' if state.sealed else 'in plaintext'}, "
                f"but the target {'seals' if sealed else 'does not seal'} this type"
            )
            continue
        try:
            path = canonical_path(folder, state.group, state.resource, state.namespace, state.name, sensitive)
            if sealed:
                # a document stored by a version that left more readable is refused like the worker
                # refuses it, so a rebuild cannot put its plaintext back into Git
                SealedDocument.parse(state.object_json)
                content = state.object_json
            else:
                # the committed bytes when the record has them (schema v2), else rendered again
                content = state.document or render_object(parse_object_json(state.object_json))
        except (LayoutError, RenderError, SealedDocumentError) as exc:
            desired.refused.append(f"{_where(state)}: {exc}")
            continue
        obj = ChangedObject(
            Operation.UPDATE, state.group, state.version, state.resource, state.namespace, state.name
        )
        desired.files[path] = (content, obj)
        if placeable is not None and placeable(state):
            change = _change_of(folder, state, sealed=sealed)
            if change is not None:
                desired.changes[path] = change
    return desired


def _change_of(folder: str, state: ObjectState, *, sealed: bool) -> LiveChange | None:
    """The stored object as a change from nothing known: its home document only takes the values
    it already holds, a sealed one is its SOPS document, whole (None: the object names no kind)."""
    try:
        after = (
            sealed_object(state.object_json) if sealed else live_object(parse_object_json(state.object_json))
        )
    except RenderError:
        return None
    if after is None:
        return None
    kind = after.get("kind")
    if not isinstance(kind, str) or not kind:
        return None
    key = HomeKey(state.group, kind, state.namespace, state.name)
    placed = placed_object(key, state.version, state.resource, after, sensitive=sealed)
    return LiveChange(folder, key, placed, None, after)


def _where(state: ObjectState) -> str:
    return f"{state.target}/{state.group}/{state.resource}/{state.namespace}/{state.name}"


def reconcile_plan(
    tree: Files, target: TargetSettings, desired: Desired, base: Plan, homes: Collection[str] = ()
) -> Plan:
    """`base` (identity, names) with the writes that make the target's folder exactly `desired`.

    Every listed document that is not desired is deleted (an exact rebuild), except the files in
    `homes`: where a desired object lives, a user's file at an object's path that the rebuild
    edits in place."""
    folder = normalize_target_path(target.path)
    writes: Writes = dict(desired.files)
    for path in documents(tree, folder):
        if path not in writes and path not in homes:
            writes[path] = (None, ChangedObject(Operation.DELETE, "", "", "", "", path))
    return dataclasses.replace(base, writes=writes, changes=dict(desired.changes))
