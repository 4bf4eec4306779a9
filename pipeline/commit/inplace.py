"""Where a live change lands in a target folder people already keep: its home, a placement, or the
canonical path (docs/intent.md).

The decider records each change as a `LiveChange` (the object before and after, and the records it
came from) next to today's canonical write. Where it goes is decided when the commit is made, on
the tree the commit lands on, by `place`: an object whose home is a document somewhere else in the
folder is edited there (`pipeline.intent.plan`); an object whose home is its own canonical file, the
only document in it, is written there as today, byte for byte; an object without a home goes where
the placement rules put it, else to the canonical path. Deciding at commit time, rather than
when the change arrives, means a commit replayed onto a moved remote tip edits the file as the
remote has it, and two changes to one multi-document file in one window see each other.

Everything here is pure: the worker hands in the folder's index and files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from pipeline.codec.branch_work import WorkItem
from pipeline.intent.documents import IntentRefusal, RefusalReason
from pipeline.intent.homes import FolderIndex, Home
from pipeline.intent.homes import ObjectKey as HomeKey
from pipeline.intent.placement import resolve
from pipeline.intent.plan import EditKind, FileWrite, IntentPlan, plan_change, plan_new_file
from pipeline.placement import PlacedObject, Placement, PlacementError
from pipeline.sealing import content_digest_of

__all__ = [
    "Homes",
    "LastSeen",
    "LiveChange",
    "guess_resource",
    "indexed",
    "kind_of",
    "live_object",
    "place",
    "placed_object",
    "remembered",
    "same_sealed",
    "sealed_object",
    "unlisted_homes",
]


class Homes(Protocol):
    """The branch's home indexes, one per target folder (`pipeline.commit.homes.BranchHomes`)."""

    def folder(self, target_path: str) -> FolderIndex | None: ...


@dataclass(frozen=True, slots=True)
class LiveChange:
    """One object's change, kept with its window until the commit (and any replay of it).

    `before` is the live object before the window's first change of it (None: it did not exist, or
    the worker does not know it); `after` the object after its last (None: deleted). `items` are
    the records it came from, parked together when the change is refused; a snapshot's object has
    none and is `listed`: a user's document of it is left as it is. A `swept` change is a
    snapshot's removal of an object it no longer lists (`unlisted_homes`): it removes the object's
    one editable document and nothing else.
    """

    folder: str
    key: HomeKey
    placed: PlacedObject
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    items: tuple[WorkItem, ...] = ()
    listed: bool = False
    swept: bool = False

    def then(self, later: LiveChange) -> LiveChange:
        """This change followed by `later` in the same window: one change from this one's before
        to the later one's after."""
        return dataclasses.replace(later, before=self.before, items=self.items + later.items)


def placed_object(
    key: HomeKey, version: str, resource: str, obj: Mapping[str, Any] | None, *, sensitive: bool
) -> PlacedObject:
    """What a placement template reads of an object: its type and name from `key` and the stream,
    its labels from `obj` (none without it: a swept object is placed by type and name alone)."""
    metadata = obj.get("metadata") if obj is not None else None
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return PlacedObject(
        key.group,
        version,
        resource,
        key.kind,
        key.namespace,
        key.name,
        labels if isinstance(labels, Mapping) else {},
        sensitive=sensitive,
    )


def live_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as files hold it: `status` is the cluster's, never written."""
    return {k: v for k, v in obj.items() if k != "status"}


def guess_resource(kind: str) -> str:
    """The resource Kubernetes guesses for a kind (`meta.UnsafeGuessKindToResource`): lower case,
    `-s` to `-ses`, `-y` to `-ies`, else `-s`."""
    lower = kind.lower()
    if lower.endswith("s"):
        return f"{lower}es"
    if lower.endswith("y"):
        return f"{lower[:-1]}ies"
    return f"{lower}s" if lower else ""


def kind_of(folder: FolderIndex, group: str, resource: str, namespace: str, name: str) -> str:
    """The kind of the indexed object `group/resource namespace/name`, for a delete (which carries no
    object): the one kind indexed under that name whose resource Kubernetes would guess as
    `resource` (or spell as the kind itself, as `Endpoints`); "" when none or several match."""
    kinds = {
        *folder.index.kinds_named(group, namespace, name),
        *folder.index.kinds_named(group, "", name),
    }
    found = sorted(k for k in kinds if resource in (guess_resource(k), k.lower()))
    return found[0] if len(found) == 1 else ""


def indexed(folder: FolderIndex, group: str, namespace: str, name: str) -> bool:
    """Whether an object of that name may live in a file edited in place (a cheap test before an
    object's JSON is read to find out): a document of that name is indexed, or the folder has a
    kustomization a new object may be placed beside."""
    index = folder.index
    return (
        bool(index.kustomizations)
        or bool(index.kinds_named(group, namespace, name))
        or bool(index.kinds_named(group, "", name))
    )


def _own_file(folder: FolderIndex, path: str, canonical: str) -> bool:
    """Whether `path` is the object's canonical file holding nothing else: the pipeline's own."""
    return path == canonical and folder.documents(canonical) <= 1


def remembered(folder: FolderIndex, key: HomeKey, canonical: str, *, placed: bool = False) -> bool:
    """Whether the worker keeps the live object for the next change of it: when it lives, or may
    come to live, in a file the pipeline edits in place rather than rewrites (`placed`: a
    placement template of its target applies to it)."""
    homes = folder.index.candidates(key)
    if homes:
        return not (len(homes) == 1 and _own_file(folder, homes[0].path, canonical))
    return placed or bool(folder.index.kustomizations)


def place(
    folder: FolderIndex,
    canonical: str,
    content: bytes | None,
    change: LiveChange,
    placement: Placement,
) -> IntentPlan | None:
    """The writes for `change` in `folder`, or None for today's canonical write (or delete) of
    `content` at `canonical`; a new object goes where its target's `placement` says
    (`pipeline.intent.placement.resolve`). Raises IntentRefusal for a change that cannot be
    written safely.

    A snapshot's object (`listed`) whose home is elsewhere is left as its file has it (an empty
    plan): a snapshot says what exists, not what changed, and a user's file is edited only by a
    change. A sensitive object's SOPS document is never edited, only written whole to a file of
    its own (`_place_sealed`); a sweep's removal takes only a document it may remove (`_sweepable`).
    """
    homes = folder.index.candidates(change.key)
    if change.swept and not _sweepable(folder, homes, canonical):
        return IntentPlan(EditKind.IN_PLACE, canonical, ())
    if change.placed.sensitive and not change.swept:
        return _place_sealed(folder, canonical, content, change, placement)
    if len(homes) == 1 and _own_file(folder, homes[0].path, canonical):
        return None
    if homes:
        if change.listed:
            return IntentPlan(EditKind.IN_PLACE, homes[0].path, ())
        return plan_change(folder.index, folder.files, change.key, (change.before, change.after))
    if change.after is None or content is None:
        return None
    try:
        resolved = resolve(placement, change.placed, folder.index, change.folder)
    except PlacementError as exc:
        raise IntentRefusal(RefusalReason.UNPLACEABLE, str(exc)) from None
    if resolved is None or resolved[0] == canonical:
        return None
    return plan_new_file(folder.index, folder.files, resolved[0], content.decode("utf-8"))


def sealed_object(content: bytes | None) -> dict[str, Any] | None:
    """What a SOPS document says in plaintext (its kind and metadata, which stay readable), as
    the object a sealed change places; None for a delete or a document that is no mapping."""
    if content is None:
        return None
    try:
        tree = yaml.safe_load(content)
    except yaml.YAMLError:
        return None
    return tree if isinstance(tree, dict) else None


def same_sealed(existing: bytes, content: bytes) -> bool:
    """Two SOPS documents of one object hold the same plaintext when their keyed digests match.

    SOPS output differs on every run, so blob ids cannot tell; a document without our digest
    (written by another tool) always counts as changed.
    """
    digest = content_digest_of(content)
    return digest is not None and digest == content_digest_of(existing)


def _bundled(path: str) -> IntentRefusal:
    return IntentRefusal(
        RefusalReason.UNPLACEABLE,
        f"{path} holds other documents; a sealed (SOPS) document is written to a file of its own",
        path,
    )


def _place_sealed(
    folder: FolderIndex, canonical: str, content: bytes | None, change: LiveChange, placement: Placement
) -> IntentPlan | None:
    """A sensitive object's SOPS document, always a whole file of its own: rewritten where it
    lives (unchanged plaintext, by its digest, writes nothing), else where a `placement`
    template puts it (never beside the folder's kustomization), else at the canonical path (None).
    A file that holds other documents is never given one: it is refused by name."""
    home = folder.index.home_of(change.key)
    if home is not None:
        if home.path == canonical:
            return None
        if folder.documents(home.path) > 1:
            raise _bundled(home.path)
        if change.after is None or content is None:
            return plan_change(folder.index, folder.files, change.key, (None, None))
        if same_sealed(folder.files[home.path], content):
            return IntentPlan(EditKind.IN_PLACE, home.path, ())
        return IntentPlan(EditKind.IN_PLACE, home.path, (FileWrite(home.path, content),))
    if change.after is None or content is None:
        return None
    try:
        chosen = placement.choose(change.placed)
    except PlacementError as exc:
        raise IntentRefusal(RefusalReason.UNPLACEABLE, str(exc)) from None
    if chosen is None:
        return None
    path = f"{change.folder}/{chosen[0]}" if change.folder else chosen[0]
    if path == canonical:
        return None
    if path in folder.files:
        raise _bundled(path)
    return plan_new_file(folder.index, folder.files, path, content.decode("utf-8"))


def _sweepable(folder: FolderIndex, homes: Sequence[Home], canonical: str) -> bool:
    """Whether a sweep may remove the one document in `homes`: it is the only one claiming the
    object, nothing blocks an edit of its file (another tool's file, an unmodelled kustomization,
    a shared base), and it is not the object's own canonical file (the canonical sweep's, which
    checks the file holds its object)."""
    if len(homes) != 1 or homes[0].blocked is not None:
        return False
    return not _own_file(folder, homes[0].path, canonical)


def unlisted_homes(
    folder: FolderIndex, group: str, resource: str, scope: str, listed: Mapping[str, AbstractSet[str]]
) -> list[HomeKey]:
    """The objects of `group/resource` that documents of `folder` hold and a snapshot of `scope`
    ("" for every namespace) does not list (`listed`: the names it listed per namespace), sorted:
    the sweep's candidates beyond the canonical paths, wherever the documents live.

    A document without a namespace names no namespace the snapshot could vouch for: under a
    namespace scope it is never a candidate, and under the cluster-wide scope only when no listed
    object has its name in any namespace. Which of them may really go is `place`'s to say, on the
    tree the commit lands on.
    """
    names: set[str] | None = None  # every name listed, in any namespace; made when first needed
    found: list[HomeKey] = []
    for key in folder.index.homes:
        if key.group != group or resource not in (guess_resource(key.kind), key.kind.lower()):
            continue
        if scope and key.namespace != scope:
            continue
        if key.name in listed.get(key.namespace, ()):
            continue
        if not key.namespace:
            if names is None:
                names = set().union(*listed.values())
            if key.name in names:
                continue
        found.append(key)
    # sorted once found (nearly always none), not the whole index first
    return sorted(found)


class LastSeen:
    """The live object as last applied, per canonical path, for objects whose files are edited in
    place: the next change of such an object is the difference from it (`pipeline.intent.edit`)."""

    __slots__ = ("_objects",)

    def __init__(self) -> None:
        self._objects: dict[str, Mapping[str, Any]] = {}

    def get(self, path: str) -> Mapping[str, Any] | None:
        return self._objects.get(path)

    def note(self, path: str, obj: Mapping[str, Any] | None) -> None:
        """`obj` is now the object at `path` (None: gone, or not worth keeping)."""
        if obj is None:
            self._objects.pop(path, None)
        else:
            self._objects[path] = obj
