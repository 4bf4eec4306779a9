"""Rebuilding a target's folder on a branch from `<prefix>.object-state`: one reconciling commit per target.

The desired tree of a target is its current objects, rendered exactly as the commit worker
renders them; every object document already under the target's folder that is not desired is
removed, and nothing outside the folder is touched. So the same code starts a target on an empty
branch and repairs a branch that drifted (adds, updates and removes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.codec.object_state import ObjectState
from pipeline.commit.gittree import GitTree
from pipeline.commit.layout import LayoutError, canonical_path, is_sensitive, normalize_target_path
from pipeline.commit.messages import ChangedObject
from pipeline.commit.plan import Plan
from pipeline.commit.yamlrender import RenderError, parse_object_json, render_object
from pipeline.config import TargetSettings
from pipeline.sealing import SealedDocument, SealedDocumentError, sensitive_set

__all__ = ["Desired", "desired_files", "documents", "reconcile_plan"]

DOCUMENT_SUFFIX = ".yaml"


@dataclass(slots=True)
class Desired:
    """A target's files as its object state says they must be, and the states that could not be used."""

    files: dict[str, tuple[bytes, ChangedObject]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)


def desired_files(target: TargetSettings, states: Iterable[ObjectState]) -> Desired:
    """Path -> content for every current object of `target`, at the target's configured path."""
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
            desired.refused.append(f"{_where(state)}: stored {'sealed' if state.sealed else 'in plaintext'}, "
                                   f"but the target {'seals' if sealed else 'does not seal'} this type")
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
        obj = ChangedObject("UPDATE", state.group, state.version, state.resource, state.namespace, state.name)
        desired.files[path] = (content, obj)
    return desired


def _where(state: ObjectState) -> str:
    return f"{state.target}/{state.group}/{state.resource}/{state.namespace}/{state.name}"


def documents(tree: GitTree, target_path: str) -> list[str]:
    """Every object document under a target's folder: `<scope>/[group/]<resource>/<name>.yaml`."""
    def join(*parts: str) -> str:
        return "/".join(p for p in parts if p)

    found: list[str] = []
    for scope in tree.folders(target_path):
        scope_dir = join(target_path, scope)
        for first in tree.folders(scope_dir):
            type_dir = join(scope_dir, first)
            found += [f"{type_dir}/{n}" for n in tree.files(type_dir) if n.endswith(DOCUMENT_SUFFIX)]
            for second in tree.folders(type_dir):
                group_dir = join(type_dir, second)
                found += [f"{group_dir}/{n}" for n in tree.files(group_dir) if n.endswith(DOCUMENT_SUFFIX)]
    return found


def reconcile_plan(tree: GitTree, target: TargetSettings, desired: Desired, base: Plan) -> Plan:
    """`base` (identity, names) with the writes that make the target's folder exactly `desired`."""
    folder = normalize_target_path(target.path)
    writes: dict[str, tuple[bytes | None, ChangedObject]] = dict(desired.files)
    for path in documents(tree, folder):
        if path not in writes:
            writes[path] = (None, ChangedObject("DELETE", "", "", "", "", path))
    base.writes = writes
    base.size = sum(len(c) for c, _ in desired.files.values())
    return base

