"""The files an object's change rewrites in a user's folder: its home, an overlay's entry, or a new file.

Given the folder's index and a live change, `plan_change` returns the whole-file writes that
express it, or None when the object has no home (the caller then places a new file). The rules,
in the order they apply:

- an object with a home is edited there, as a minimal edit (`pipeline.intent.edit`); a deleted
  object's document is removed, and its file too when nothing else is left in it, together with
  the file's entry in the kustomization that lists it;
- an object whose home is a base several overlays share is never edited there. When the change
  is only to container images or the replica count, the overlay that renders the object's
  namespace gets (or updates) its `images:` or `replicas:` entry instead; any other change to a
  shared base is refused;
- an image or replica change of an object whose own kustomization (one that renders its file)
  holds an `images:` entry for the image or a `replicas:` entry for the object is written into
  that entry, where the value lives: the document's value is overridden on every build, so
  editing it would change nothing kustomize renders. Where several kustomizations hold one, the
  outermost (applied last) gets it;
- a new file is registered in the `resources:` of the kustomization that governs its folder.

Every refusal is an IntentRefusal raised before anything is written.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from pipeline.intent.documents import IntentRefusal, RefusalReason, split_file
from pipeline.intent.edit import (
    Change,
    ChangeKind,
    apply_changes,
    held_changes,
    load_document,
    plain,
    user_changes,
)
from pipeline.intent.homes import HomeIndex, ObjectKey
from pipeline.intent.kustomization import Kustomization

__all__ = ["EditKind", "FileWrite", "IntentPlan", "plan_change", "plan_new_file", "split_image"]


class EditKind(StrEnum):
    IN_PLACE = "in-place"
    REMOVED_DOCUMENT = "removed-document"
    REMOVED_FILE = "removed-file"
    OVERLAY_ENTRY = "overlay-entry"
    NEW_FILE = "new-file"
    APPENDED = "appended"


@dataclass(frozen=True, slots=True)
class FileWrite:
    """A file's new content, or its deletion (`data` None)."""

    path: str
    data: bytes | None


@dataclass(frozen=True, slots=True)
class IntentPlan:
    kind: EditKind
    path: str
    writes: tuple[FileWrite, ...]


def split_image(image: str) -> tuple[str, str, str]:
    """`(name, tag, digest)` of an image reference; a registry port is not a tag."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest
    return name, "", digest


def _overlay_for(index: HomeIndex, path: str, namespace: str) -> Kustomization:
    """The render root that renders the shared file at `path` with `namespace`."""
    for kustomization in index.kustomizations.values():
        if kustomization.namespace != namespace:
            continue
        if _reaches(index, kustomization, path, frozenset()):
            return kustomization
    raise IntentRefusal(
        RefusalReason.SHARED_BASE, f"no overlay renders {path} into namespace {namespace!r}", path
    )


def _reaches(index: HomeIndex, kustomization: Kustomization, path: str, seen: frozenset[str]) -> bool:
    for entry in kustomization.resources:
        if entry == path:
            return True
        child = index.kustomizations.get(entry)
        if child is not None and entry not in seen and _reaches(index, child, path, seen | {entry}):
            return True
    return False


def _overlay_edit(
    index: HomeIndex, files: Mapping[str, bytes], key: ObjectKey, path: str, live: tuple[Any, Any]
) -> IntentPlan:
    """The shared base stays as it is; the change goes into the overlay's `images:`/`replicas:`."""
    live_before, live_after = live
    edits = user_changes(live_before, live_after)
    images: dict[str, str] = {}
    replicas: int | None = None
    for edit in edits:
        if edit.path == ("spec", "replicas") and edit.kind is ChangeKind.SET and isinstance(edit.value, int):
            replicas = edit.value
        elif _is_image(edit.path) and edit.kind is ChangeKind.SET and isinstance(edit.value, str):
            old = _value_at(live_before, edit.path)
            if not isinstance(old, str):
                raise _boundary(key, path)
            images[old] = edit.value
        else:
            raise _boundary(key, path)
    overlay = _overlay_for(index, path, key.namespace)
    file = split_file(files[overlay.path], overlay.path)
    document = load_document(file.documents[0].text, overlay.path)
    for old, new in images.items():
        _set_image(document.data, old, new)
    if replicas is not None:
        _set_replicas(document.data, key.name, replicas)
    text = file.replaced(0, document.dump())
    return IntentPlan(EditKind.OVERLAY_ENTRY, overlay.path, (FileWrite(overlay.path, file.encode(text)),))


def _is_image(path: tuple[str | int, ...]) -> bool:
    """`spec.template.spec.{containers,initContainers}[i].image`."""
    return (
        len(path) == 6
        and path[:3] == ("spec", "template", "spec")
        and path[3] in ("containers", "initContainers")
        and isinstance(path[4], int)
        and path[5] == "image"
    )


def _value_at(value: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        if isinstance(key, int):
            value = value[key] if isinstance(value, list) and key < len(value) else None
        else:
            value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _boundary(key: ObjectKey, path: str) -> IntentRefusal:
    return IntentRefusal(
        RefusalReason.SHARED_BASE,
        f"{key.kind} {key.namespace}/{key.name} lives in {path}, a base other overlays share; only "
        "image and replica changes can be written into the overlay",
        path,
    )


def _entries(data: CommentedMap, field: str) -> CommentedSeq:
    entries = data.get(field)
    if entries is None:
        entries = CommentedSeq()
        data[field] = entries
    if not isinstance(entries, CommentedSeq):
        raise IntentRefusal(RefusalReason.UNSUPPORTED_KUSTOMIZE, f"{field} is not a list")
    return entries


def _set_image(data: CommentedMap, old: str, new: str) -> None:
    """Points the overlay's entry for `old`'s image name at `new`, adding the entry when missing."""
    old_name = split_image(old)[0]
    new_name, new_tag, new_digest = split_image(new)
    entries = _entries(data, "images")
    entry = next((e for e in entries if isinstance(e, CommentedMap) and e.get("name") == old_name), None)
    if entry is None:
        entry = CommentedMap([("name", old_name)])
        entries.append(entry)
    if new_name != old_name:
        entry["newName"] = new_name
    elif "newName" in entry:
        del entry["newName"]
    for field, value in (("newTag", new_tag), ("digest", new_digest)):
        if value:
            entry[field] = value
        elif field in entry:
            del entry[field]


def _set_replicas(data: CommentedMap, name: str, count: int) -> None:
    entries = _entries(data, "replicas")
    for entry in entries:
        if isinstance(entry, CommentedMap) and entry.get("name") == name:
            entry["count"] = count
            return
    entries.append(CommentedMap([("name", name), ("count", count)]))


def _governing(index: HomeIndex, path: str) -> Kustomization | None:
    """The kustomization in the folder of `path` or the nearest folder above it, if any."""
    directory = posixpath.dirname(path)
    while True:
        found = index.kustomizations.get(directory)
        if found is not None:
            return found
        if not directory:
            return None
        directory = posixpath.dirname(directory)


def _resources_edit(
    files: Mapping[str, bytes], kustomization: Kustomization, path: str, *, add: bool
) -> FileWrite | None:
    """The kustomization with `path` added to or removed from `resources:`, or None if unchanged."""
    entry = posixpath.relpath(path, kustomization.directory or ".")
    listed = path in kustomization.resources
    if listed == add:
        return None
    file = split_file(files[kustomization.path], kustomization.path)
    document = load_document(file.documents[0].text, kustomization.path)
    resources = _entries(document.data, "resources")
    if add:
        resources.append(entry)
    else:
        for position, value in enumerate(resources):
            if posixpath.normpath(posixpath.join(kustomization.directory, str(value))) == path:
                del resources[position]
                break
    return FileWrite(kustomization.path, file.encode(file.replaced(0, document.dump())))


def plan_change(
    index: HomeIndex, files: Mapping[str, bytes], key: ObjectKey, live: tuple[Any, Any]
) -> IntentPlan | None:
    """The writes for a live change (`live`: the object before and after, None for absent or not
    known), or None when the object has no home. Without the object before, only the values the
    home document already holds are updated (`held_changes`). Raises IntentRefusal for a change
    that cannot be written safely."""
    try:
        home = index.home_of(key)
    except IntentRefusal as refusal:
        if refusal.reason is not RefusalReason.SHARED_BASE or live[1] is None or live[0] is None:
            raise
        homes = index.candidates(key)
        return _overlay_edit(index, files, key, homes[0].path, live)
    if home is None:
        return None
    file = split_file(files[home.path], home.path)
    live_before, live_after = live
    if live_after is None:
        remaining = file.without(home.document)
        if remaining is None:
            writes = [FileWrite(home.path, None)]
            kustomization = _governing(index, home.path)
            if kustomization is not None:
                listing = _resources_edit(files, kustomization, home.path, add=False)
                writes += [listing] if listing else []
            return IntentPlan(EditKind.REMOVED_FILE, home.path, tuple(writes))
        write = FileWrite(home.path, file.encode(remaining))
        return IntentPlan(EditKind.REMOVED_DOCUMENT, home.path, (write,))
    document = load_document(file.documents[home.document].text, home.path)
    edits = (
        user_changes(live_before, live_after)
        if live_before is not None
        else held_changes(plain(document.data), live_after)
    )
    edits, entries = _entry_edits(index, files, key, home.path, plain(document.data), edits)
    if entries is not None and not edits:
        return IntentPlan(EditKind.OVERLAY_ENTRY, entries.path, (entries,))
    text = file.replaced(home.document, apply_changes(document, edits))
    write = FileWrite(home.path, file.encode(text))
    return IntentPlan(EditKind.IN_PLACE, home.path, (write,) if entries is None else (write, entries))


def _entry_edits(
    index: HomeIndex,
    files: Mapping[str, bytes],
    key: ObjectKey,
    path: str,
    document: Any,
    edits: list[Change],
) -> tuple[list[Change], FileWrite | None]:
    """`edits` split into those for the document and the kustomization entries (`images:`,
    `replicas:`) that override the value the document holds; the kustomization's new content, or
    None when no entry holds any of the changed values."""
    reaching = [k for k in index.kustomizations.values() if _reaches(index, k, path, frozenset())]
    if not reaching:
        return edits, None
    owners: dict[str, Kustomization] = {}
    images: dict[str, list[tuple[str, str]]] = {}
    replicas: dict[str, int] = {}
    rest: list[Change] = []
    for edit in edits:
        if edit.kind is ChangeKind.SET and edit.path == ("spec", "replicas") and isinstance(edit.value, int):
            owner = _outermost(index, [k for k in reaching if any(r.name == key.name for r in k.replicas)])
            if owner is not None:
                owners[owner.path], replicas[owner.path] = owner, edit.value
                continue
        elif edit.kind is ChangeKind.SET and _is_image(edit.path) and isinstance(edit.value, str):
            held = _value_at(document, edit.path)
            name = split_image(held)[0] if isinstance(held, str) else ""
            owner = _outermost(index, [k for k in reaching if any(i.name == name for i in k.images)])
            if owner is not None:
                owners[owner.path] = owner
                images.setdefault(owner.path, []).append((held, edit.value))
                continue
        rest.append(edit)
    if not owners:
        return edits, None
    if len(owners) > 1:
        raise IntentRefusal(
            RefusalReason.UNSUPPORTED_KUSTOMIZE,
            f"{key.kind} {key.namespace}/{key.name}: its image and replica entries live in "
            f"{', '.join(sorted(owners))}; one change is written into one kustomization",
        )
    (owner,) = owners.values()
    file = split_file(files[owner.path], owner.path)
    loaded = load_document(file.documents[0].text, owner.path)
    for old, new in images.get(owner.path, []):
        _set_image(loaded.data, old, new)
    if owner.path in replicas:
        _set_replicas(loaded.data, key.name, replicas[owner.path])
    return rest, FileWrite(owner.path, file.encode(file.replaced(0, loaded.dump())))


def _outermost(index: HomeIndex, candidates: list[Kustomization]) -> Kustomization | None:
    """The candidate that reaches every other one (kustomize applies it last), if any."""
    for candidate in candidates:
        others = [c for c in candidates if c is not candidate]
        if all(_reaches(index, candidate, other.directory, frozenset()) for other in others):
            return candidate
    return None


def plan_new_file(index: HomeIndex, files: Mapping[str, bytes], path: str, text: str) -> IntentPlan:
    """A new object's document written at `path` (appended when the file exists), and the file
    registered with the kustomization that governs its folder."""
    writes: list[FileWrite] = []
    if path in files:
        file = split_file(files[path], path)
        writes.append(FileWrite(path, file.encode(file.appended(text))))
        kind = EditKind.APPENDED
    else:
        writes.append(FileWrite(path, text.encode("utf-8")))
        kind = EditKind.NEW_FILE
    kustomization = _governing(index, path)
    if kustomization is not None:
        listing = _resources_edit(files, kustomization, path, add=True)
        writes += [listing] if listing else []
    return IntentPlan(kind, path, tuple(writes))
