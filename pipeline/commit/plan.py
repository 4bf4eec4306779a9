"""What one commit will do, kept until it is pushed so it can be replayed onto a moved remote tip.

A plan stores rendered file contents and deletions (and, for a snapshot, the sweep it implies),
never a diff: replaying it onto a different base re-decides what actually changes there, so work
the remote already has produces no second commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypedDict

from pipeline.codec.branch_work import CommitRequested
from pipeline.commit.identity import COMMITTER_KIND, UNRESOLVED_KIND, AuthorKind, Identity
from pipeline.commit.inplace import LiveChange, same_sealed
from pipeline.commit.layout import in_scope, is_sealed_path
from pipeline.commit.messages import (
    ChangedObject,
    Reconciled,
    rebuild_message,
    reconcile_message,
    retire_message,
    window_message,
)
from pipeline.commit.ownership import holds_its_object
from pipeline.commit.position import LogPosition
from pipeline.config import CommitMessageSettings
from pipeline.intent.documents import IntentRefusal
from pipeline.intent.plan import EditKind, FileWrite, IntentPlan
from pipeline.log.api import PendingRecord
from pipeline.prune import Prune
from pipeline.slices import Steps

__all__ = [
    "Applied",
    "Byline",
    "Files",
    "Placer",
    "Plan",
    "PlanKind",
    "PlanParts",
    "Refused",
    "Retired",
    "Sweep",
    "Tree",
    "Writes",
    "apply_steps",
    "blob_sha",
    "documents",
    "message_for",
    "orphans",
]

#: The suffix of every object document (`.sops.yaml` documents end in it too).
DOCUMENT_SUFFIX = ".yaml"


class Files(Protocol):
    """What deciding needs of a branch's tree: a file's blob id and a folder's listing.

    `GitTree` is one; the decider's tests use a dictionary-backed one, without Git.
    """

    def get(self, path: str) -> bytes | None: ...

    def files(self, folder: str) -> list[str]: ...

    def folders(self, folder: str) -> list[str]: ...


class Tree(Files, Protocol):
    """What applying a plan needs of a branch's tree: reading it, and changing a file in it.

    `GitTree` is one (the shell's, writing to the object database); the plan never imports Git.
    """

    def put(self, path: str, blob_sha: bytes) -> None: ...

    def delete(self, path: str) -> bool: ...


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
    # a finished snapshot's own set of paths (not copied: it names every object it listed)
    keep: AbstractSet[str]
    prune: bool


@dataclass(frozen=True, slots=True)
class Retired:
    """A deleted target whose documents a `retire` plan removes: its folder, prune mode and why."""

    folder: str
    prune: Prune
    reason: str


class PlanKind(StrEnum):
    """What a plan commits, which decides its message (`message_for`)."""

    WINDOW = "window"
    SNAPSHOT = "snapshot"
    # a part of a snapshot committed in parts: no sweep, and its commit claims no offset
    SNAPSHOT_PART = "snapshot_part"
    REBUILD = "rebuild"
    RETIRE = "retire"


#: path -> (rendered content, None for a delete; the object as the message names it)
Writes = dict[str, tuple[bytes | None, ChangedObject]]

#: Where a change goes on the tree being committed (`pipeline.commit.inplace.place`): the canonical
#: path and content, and the change; None for the canonical write. Raises IntentRefusal.
Placer = Callable[[str, bytes | None, LiveChange], IntentPlan | None]


@dataclass(frozen=True, slots=True)
class Byline:
    """Who a commit names and how: identity, the commits metric's `author_kind`, the name in its
    message, the `Reverser-Attribution` trailer values and the author time (seconds)."""

    identity: Identity
    kind: AuthorKind
    label: str
    time_s: int
    attributions: tuple[str, ...] = ()

    @classmethod
    def committer(cls, identity: Identity, time_s: int) -> Byline:
        """The committer as the author: snapshots, retired targets and rebuilds."""
        return cls(identity, COMMITTER_KIND, identity.name, time_s)


class PlanParts(TypedDict, total=False):
    """The optional parts of a plan (see `Plan`), for the one function that builds plans."""

    observed_at_ms: int
    sweep: Sweep | None
    resource: str
    revision: str
    template: CommitMessageSettings | None
    states: list[PendingRecord]
    requests: tuple[CommitRequested, ...]
    retired: Retired | None
    scanned: bool
    changes: dict[str, LiveChange]


@dataclass(slots=True)
class Plan:
    """One closed window, finished snapshot, retired target or rebuild, ready to become a commit.

    `at` is the branch-work record its trailers claim (a rebuild and a snapshot's part claim
    none); `size` is the bytes of its rendered writes, kept so the unpushed backlog is bounded
    without summing them again.
    """

    kind: PlanKind
    target: str
    at: LogPosition
    byline: Byline
    writes: Writes = field(default_factory=dict)
    observed_at_ms: int = 0
    sweep: Sweep | None = None
    resource: str = ""
    revision: str = ""
    template: CommitMessageSettings | None = None
    # object-state records to write once this plan is on the remote (statebook.py)
    states: list[PendingRecord] = field(default_factory=list)
    # CommitRequests this commit answers (flush.py): reported with its sha once pushed
    requests: tuple[CommitRequested, ...] = ()
    retired: Retired | None = None
    # its deletes were found by listing a folder (a retired target, a rebuild's unlisted files),
    # not named by changes: each is kept unless it holds its object (ownership.py)
    scanned: bool = False
    # per canonical path of `writes`, the change behind it, placed when the commit is made
    changes: dict[str, LiveChange] = field(default_factory=dict)
    size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.size = sum(len(content) for content, _ in self.writes.values() if content is not None)


@dataclass(frozen=True, slots=True)
class Refused:
    """A change the in-place writer refused: nothing of it was written."""

    path: str
    change: LiveChange
    refusal: IntentRefusal


@dataclass(slots=True)
class Applied:
    """What applying a plan to a tree changed."""

    objects: list[ChangedObject] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    retained: int = 0
    swept: int = 0
    # files a sweep or scan kept because they are not the object their path names (ownership.py)
    not_ours: list[str] = field(default_factory=list)
    # changes the in-place writer refused, and the kinds of the edits it made
    refusals: list[Refused] = field(default_factory=list)
    placed: list[EditKind] = field(default_factory=list)
    # the new content of every file it changed (None: deleted), for the home index (homes.py)
    files: dict[str, bytes | None] = field(default_factory=dict)
    # the object each canonical write is the rendering of: the home index learns the file from it
    rendered: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def changed_file(self, verb: str, path: str, data: bytes | None) -> None:
        """Record one changed file (`verb`: create, update or delete)."""
        self.paths.append(f"{verb} {path}")
        self.files[path] = data

    @property
    def changed(self) -> bool:
        return bool(self.paths)


def _apply_files(
    tree: Tree, writes: tuple[FileWrite, ...], store_blob: Callable[[bytes], bytes], applied: Applied
) -> bool:
    """Write an in-place edit's files; returns whether any changed."""
    changed = False
    for write in writes:
        if write.data is None:
            if tree.delete(write.path):
                applied.changed_file("delete", write.path, None)
                changed = True
            continue
        sha = blob_sha(write.data)
        existing = tree.get(write.path)
        if existing == sha:
            continue
        try:
            tree.put(write.path, sha)
        except IsADirectoryError:
            applied.refused.append(write.path)
            continue
        store_blob(write.data)
        applied.changed_file("create" if existing is None else "update", write.path, write.data)
        changed = True
    return changed


def apply_steps(
    tree: Tree,
    plan: Plan,
    store_blob: Callable[[bytes], bytes],
    read_blob: Callable[[bytes], bytes],
    place: Placer | None = None,
) -> Steps[Applied]:
    """Apply a plan's writes, deletions and sweep to `tree`; only real changes are recorded.

    With `place`, each write that carries a change goes where `place` says (an edit of the
    object's home file, a placed new file), in the plan's order; a refused change writes nothing.
    One step per write and per sweep candidate: a snapshot's plan writes every object it lists,
    and hashing them all at once held the event loop for seconds (`pipeline.slices`).
    """
    applied = Applied()

    def ours(path: str) -> bool:
        sha = tree.get(path)
        if sha is None or holds_its_object(read_blob(sha), path):
            return True
        applied.not_ours.append(path)
        return False

    for path, (content, obj) in plan.writes.items():
        yield
        change = plan.changes.get(path)
        if place is not None and change is not None:
            try:
                placed = place(path, content, change)
            except IntentRefusal as refusal:
                applied.refusals.append(Refused(path, change, refusal))
                continue
            if placed is not None:
                if _apply_files(tree, placed.writes, store_blob, applied):
                    applied.objects.append(obj)
                    applied.placed.append(placed.kind)
                    applied.swept += 1 if change.swept else 0
                continue
        if change is not None and change.swept:
            # a sweep's removal is an edit of the object's document, never of its canonical path
            continue
        if content is None:
            if plan.scanned and not ours(path):
                applied.retained += 1
                continue
            if tree.delete(path):
                applied.objects.append(obj)
                applied.changed_file("delete", path, None)
            continue
        sha = blob_sha(content)
        existing = tree.get(path)
        if existing == sha or (
            existing is not None and is_sealed_path(path) and same_sealed(read_blob(existing), content)
        ):
            continue
        try:
            tree.put(path, sha)
        except IsADirectoryError:
            applied.refused.append(path)
            continue
        store_blob(content)
        applied.objects.append(obj)
        applied.changed_file("create" if existing is None else "update", path, content)
        if change is not None and change.after is not None and not change.placed.sensitive:
            applied.rendered[path] = change.after
    sweep = plan.sweep
    if sweep is not None:
        for orphan in orphans(tree, sweep):
            yield
            if sweep.prune and ours(orphan):
                tree.delete(orphan)
                applied.swept += 1
                applied.changed_file("delete", orphan, None)
            else:
                applied.retained += 1
    return applied


def orphans(tree: Files, sweep: Sweep) -> list[str]:
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

    A rebuild's `resource` names its source; a retire plan's `retired` says which folder and why.
    """
    if plan.kind is PlanKind.REBUILD:
        return rebuild_message(plan.target, plan.resource, applied.paths)
    if plan.kind is PlanKind.RETIRE and plan.retired is not None:
        retired = plan.retired
        return retire_message(
            plan.target, retired.folder, retired.prune, retired.reason, plan.at, applied.paths
        )
    if plan.kind in (PlanKind.SNAPSHOT, PlanKind.SNAPSHOT_PART):
        first = next((obj for _, obj in plan.writes.values()), None)
        what = Reconciled(
            plan.sweep.group if plan.sweep is not None else first.group if first is not None else "",
            first.version if first is not None else "",
            plan.resource,
            plan.revision,
        )
        claims = plan.kind is PlanKind.SNAPSHOT
        return reconcile_message(what, plan.target, plan.at, applied.paths, plan.template, claims=claims)
    byline = plan.byline
    username = "" if byline.kind in (COMMITTER_KIND, UNRESOLVED_KIND) else byline.label
    return window_message(
        applied.objects, byline.label, plan.target, byline.attributions, plan.at, plan.template, username
    )


def documents(tree: Files, target_path: str) -> list[str]:
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
