"""What one commit will do, kept until it is pushed so it can be replayed onto a moved remote tip.

A plan stores rendered file contents and deletions (and, for a snapshot, the sweep it implies),
never a diff: replaying it onto a different base re-decides what actually changes there, so work
the remote already has produces no second commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.codec.branch_work import CommitRequested
from pipeline.commit.gittree import GitTree
from pipeline.commit.identity import Identity
from pipeline.commit.layout import in_scope, is_sealed_path
from pipeline.commit.messages import (
    ChangedObject,
    rebuild_message,
    reconcile_message,
    retire_message,
    window_message,
)
from pipeline.config import CommitMessageSettings
from pipeline.log.api import PendingRecord
from pipeline.sealing import content_digest_of

__all__ = ["Applied", "Plan", "Retired", "Sweep", "apply_plan", "blob_sha", "message_for", "orphans"]


def blob_sha(data: bytes) -> bytes:
    """Git's object id for a blob with this content (computed without touching the store)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).digest()


@dataclass(frozen=True, slots=True)
class Sweep:
    """Mark-and-sweep of one snapshot scope: in-scope documents outside `keep` are orphans."""

    target_path: str
    group: str
    resource: str
    scope: str
    keep: frozenset[str]
    prune: bool


@dataclass(frozen=True, slots=True)
class Retired:
    """A deleted target whose documents a `retire` plan removes: its folder, prune mode and why."""

    folder: str
    prune: str
    reason: str


@dataclass(slots=True)
class Plan:
    """One closed window or one finished snapshot, ready to become a commit."""

    kind: str
    provider: str
    branch: str
    target: str
    author: Identity
    author_kind: str
    author_label: str
    attributions: list[str]
    author_time_s: int
    partition: int
    offset: int
    observed_at_ms: int
    writes: dict[str, tuple[bytes | None, ChangedObject]] = field(default_factory=dict)
    sweep: Sweep | None = None
    resource: str = ""
    revision: str = ""
    size: int = 0
    template: CommitMessageSettings | None = None
    # object-state records to write once this plan is on the remote (statebook.py)
    states: list[PendingRecord] = field(default_factory=list)
    # CommitRequests this commit answers (flush.py): reported with its sha once pushed
    requests: tuple[CommitRequested, ...] = ()
    retired: Retired | None = None


@dataclass(slots=True)
class Applied:
    """What applying a plan to a tree changed."""

    objects: list[ChangedObject] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    retained: int = 0
    swept: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.paths)


def _same_sealed(existing: bytes, content: bytes) -> bool:
    """Two SOPS documents of one object hold the same plaintext when their keyed digests match.

    SOPS output differs on every run, so blob ids cannot tell; a document without our digest
    (written by another tool) always counts as changed.
    """
    digest = content_digest_of(content)
    return digest is not None and digest == content_digest_of(existing)


def apply_plan(
    tree: GitTree,
    plan: Plan,
    store_blob: Callable[[bytes], bytes],
    read_blob: Callable[[bytes], bytes],
) -> Applied:
    """Apply a plan's writes, deletions and sweep to `tree`; only real changes are recorded."""
    applied = Applied()
    for path, (content, obj) in plan.writes.items():
        if content is None:
            if tree.delete(path):
                applied.objects.append(obj)
                applied.paths.append(f"delete {path}")
            continue
        sha = blob_sha(content)
        existing = tree.get(path)
        if existing == sha or (
            existing is not None and is_sealed_path(path) and _same_sealed(read_blob(existing), content)
        ):
            continue
        try:
            tree.put(path, sha)
        except IsADirectoryError:
            applied.refused.append(path)
            continue
        store_blob(content)
        applied.objects.append(obj)
        applied.paths.append(f"{'create' if existing is None else 'update'} {path}")
    sweep = plan.sweep
    if sweep is not None:
        for orphan in orphans(tree, sweep):
            if sweep.prune:
                tree.delete(orphan)
                applied.swept += 1
                applied.paths.append(f"delete {orphan}")
            else:
                applied.retained += 1
    return applied


def orphans(tree: GitTree, sweep: Sweep) -> list[str]:
    """In-scope documents of `tree` the snapshot does not keep (the candidates of its sweep)."""
    base = sweep.target_path
    type_dir = f"{sweep.group}/{sweep.resource}" if sweep.group else sweep.resource
    scopes = [sweep.scope] if sweep.scope else tree.folders(base)
    found: list[str] = []
    for scope_dir in scopes:
        folder = "/".join(p for p in (base, scope_dir, type_dir) if p)
        for name in tree.files(folder):
            path = f"{folder}/{name}"
            if path not in sweep.keep and in_scope(path, base, sweep.group, sweep.resource, sweep.scope):
                found.append(path)
    return found


def message_for(plan: Plan, applied: Applied) -> str:
    """The commit message for what the plan actually changed on this base.

    `kind` is `window`, `snapshot`, `rebuild` (a replay's reconcile; `resource` names its source)
    or `retire` (a deleted target's folder; `retired` says which and why).
    """
    if plan.kind == "rebuild":
        return rebuild_message(plan.target, plan.resource, applied.paths)
    if plan.kind == "retire" and plan.retired is not None:
        return retire_message(
            plan.target,
            plan.retired.folder,
            plan.retired.prune,
            plan.retired.reason,
            plan.provider,
            plan.branch,
            plan.partition,
            plan.offset,
            applied.paths,
        )
    if plan.kind == "snapshot":
        return reconcile_message(
            len(applied.paths),
            plan.resource,
            plan.revision,
            plan.target,
            plan.provider,
            plan.branch,
            plan.partition,
            plan.offset,
            applied.paths,
            plan.template,
            plan.sweep.group if plan.sweep is not None else "",
            next((obj.version for _, obj in plan.writes.values()), ""),
        )
    return window_message(
        applied.objects,
        plan.author_label,
        plan.target,
        plan.attributions,
        plan.provider,
        plan.branch,
        plan.partition,
        plan.offset,
        plan.template,
        "" if plan.author_kind in ("committer", "unresolved") else plan.author_label,
    )
