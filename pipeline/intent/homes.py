"""Where each object already lives in a target's folder: its home file and document.

Before it writes an object, the commit worker looks for a document that already holds it, in any
YAML file under the target path, multi-document files included, and edits it there. Objects are
known by API group, kind, namespace and name. The namespace is the one kustomize would give the
object: a kustomization's `namespace:` overrides the document's own, the outermost one that reaches
the file winning, as kustomize applies them from the inside out.

Three kinds of home are never edited, only recorded, so that nothing writes a second copy either:
a file another tool writes (a generated header, Flux's `gotk-*.yaml`, Helm's `# Source:` output),
a file under a kustomization the pipeline does not model, and a base that several render roots
share (an edit there would change every environment; the change belongs in an overlay). A file
that does not parse is recorded too and is never swept.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from pipeline.intent.documents import IntentRefusal, RefusalReason, split_file
from pipeline.intent.files import BlobReader, FolderFiles
from pipeline.intent.kustomization import Kustomization, is_kustomization_file, parse_kustomization
from pipeline.slices import Steps, finish

__all__ = [
    "FolderIndex",
    "Home",
    "HomeIndex",
    "NamespaceSource",
    "ObjectKey",
    "Unreadable",
    "build_index",
    "owner_of",
]

_YAML_SUFFIXES = (".yaml", ".yml")
_FOREIGN_FILES = frozenset({"gotk-components.yaml", "gotk-sync.yaml"})
_FOREIGN_HEADER = re.compile(r"^#\s*(Source: |.*\bgenerated\b|.*do not edit)", re.IGNORECASE)
_HEADER_LINES = 5
_HEADER_BYTES = 4096
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class NamespaceSource(StrEnum):
    """Where an indexed object's namespace comes from."""

    DOCUMENT = "document"
    KUSTOMIZATION = "kustomization"
    NONE = "none"


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    group: str
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Home:
    """A document that holds an object; `blocked` says why it may not be edited, when it may not."""

    path: str
    document: int
    namespace_source: NamespaceSource
    blocked: IntentRefusal | None = None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A YAML file under the target that could not be read; it is left alone, never swept."""

    path: str
    refusal: IntentRefusal


# How `HomeIndex` holds an object's homes: one plain home (the first document of its file, in
# the namespace the document writes, nothing blocking an edit: nearly every home) as its path
# alone, one other home as itself, several as a tuple.
_Held = str | Home | tuple[Home, ...]


def _plain_source(key: ObjectKey) -> NamespaceSource:
    return NamespaceSource.DOCUMENT if key.namespace else NamespaceSource.NONE


@dataclass(slots=True)
class HomeIndex:
    """Which documents hold each object. Held for every object of a branch for as long as its
    worker runs, so an object's one plain home is held as its path, one other home as itself and
    only several as a tuple (read them with `candidates`)."""

    homes: dict[ObjectKey, _Held] = field(default_factory=dict)
    kustomizations: dict[str, Kustomization] = field(default_factory=dict)
    refused_kustomizations: dict[str, IntentRefusal] = field(default_factory=dict)
    unreadable: list[Unreadable] = field(default_factory=list)
    # group -> kind -> how many keys of it are indexed. A delete carries no object, so the worker
    # finds its kind by looking its name up under each kind of its group (a handful), instead of
    # an entry per object name (`kinds_named`)
    group_kinds: dict[str, dict[str, int]] = field(default_factory=dict)

    def kinds_named(self, group: str, namespace: str, name: str) -> tuple[str, ...]:
        """The kinds of `group` indexed under `namespace/name`, sorted."""
        homes = self.homes
        return tuple(
            sorted(
                k for k in self.group_kinds.get(group, ()) if ObjectKey(group, k, namespace, name) in homes
            )
        )

    def candidates(self, key: ObjectKey) -> Sequence[Home]:
        """Every document that claims `key` (a document without a namespace claims it when no
        document with one does)."""
        homes = self.homes.get(key)
        if homes is None and key.namespace:
            key = ObjectKey(key.group, key.kind, "", key.name)
            homes = self.homes.get(key)
        return _several(key, homes)

    def home_of(self, key: ObjectKey) -> Home | None:
        """The one home of `key`; raises IntentRefusal when two documents claim it or it may not be
        edited. A document without a namespace is the home of a namespaced object when nothing
        else claims it (the namespace then comes from whatever applies the folder)."""
        homes = self.candidates(key)
        if not homes:
            return None
        if len(homes) > 1:
            where = ", ".join(f"{h.path}#{h.document}" for h in homes)
            raise IntentRefusal(RefusalReason.AMBIGUOUS_HOME, f"{_describe(key)} is in {where}")
        home = homes[0]
        if home.blocked is not None:
            raise home.blocked
        return home

    def files(self) -> frozenset[str]:
        return frozenset(h.path for key, homes in self.homes.items() for h in _several(key, homes))

    def add(self, key: ObjectKey, home: Home) -> None:
        held = self.homes.get(key)
        if held is None:
            kinds = self.group_kinds.setdefault(key.group, {})
            kinds[key.kind] = kinds.get(key.kind, 0) + 1
            self.homes[key] = _one(key, home)
            return
        self.homes[key] = (*_several(key, held), home)

    def drop(self, key: ObjectKey, path: str) -> None:
        """Forget the documents of `path` that claim `key`."""
        held = self.homes.get(key)
        if held is None:
            return
        kept = tuple(h for h in _several(key, held) if h.path != path)
        if kept:
            self.homes[key] = _one(key, kept[0]) if len(kept) == 1 else kept
            return
        del self.homes[key]
        kinds = self.group_kinds[key.group]
        kinds[key.kind] -= 1
        if not kinds[key.kind]:
            del kinds[key.kind]
            if not kinds:
                del self.group_kinds[key.group]


def _one(key: ObjectKey, home: Home) -> _Held:
    """`home`, the only one of `key`, as the index holds it."""
    plain = home.document == 0 and home.blocked is None and home.namespace_source == _plain_source(key)
    return home.path if plain else home


def _several(key: ObjectKey, homes: _Held | None) -> tuple[Home, ...]:
    """The homes of `key` as held (`_Held`), as `Home`s."""
    if homes is None:
        return ()
    if isinstance(homes, str):
        return (Home(homes, 0, _plain_source(key)),)
    return (homes,) if isinstance(homes, Home) else homes


def _describe(key: ObjectKey) -> str:
    kind = f"{key.kind}.{key.group}" if key.group else key.kind
    return f"{kind} {key.namespace}/{key.name}" if key.namespace else f"{kind} {key.name}"


def owner_of(path: str, data: bytes) -> str | None:
    """The reason `path` belongs to another tool, or None when a person keeps it."""
    if posixpath.basename(path) in _FOREIGN_FILES:
        return f"{path} is written by Flux"
    if data.find(b"#", 0, _HEADER_BYTES) < 0:
        # a header is a comment line: without a `#` in the head there is none to read (and a `#`
        # byte is always the character, UTF-8 never uses it inside another)
        return None
    head = data[:_HEADER_BYTES].decode("utf-8", "replace").splitlines()[:_HEADER_LINES]
    for line in head:
        if _FOREIGN_HEADER.search(line.strip()):
            return f"{path} says it is generated ({line.strip()[:80]!r})"
    return None


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _namespaces(
    kustomizations: Mapping[str, Kustomization], refused: Mapping[str, IntentRefusal]
) -> tuple[dict[str, set[str]], dict[str, IntentRefusal]]:
    """For every file a kustomization reaches: the namespaces it renders with (one per render root
    that reaches it, "" where none sets one), and the refusal of an unmodelled kustomization on the way."""
    referenced = {entry for k in kustomizations.values() for entry in k.resources if entry in kustomizations}
    roots = [d for d in kustomizations if d not in referenced]
    reached: dict[str, set[str]] = {}
    blocked: dict[str, IntentRefusal] = {}

    def walk(directory: str, namespace: str, seen: frozenset[str]) -> Iterator[tuple[str, str]]:
        kustomization = kustomizations[directory]
        namespace = namespace or kustomization.namespace
        for entry in kustomization.resources:
            if entry in kustomizations and entry not in seen:
                yield from walk(entry, namespace, seen | {entry})
            elif entry.endswith(_YAML_SUFFIXES):
                yield entry, namespace

    for root in roots:
        for path, namespace in walk(root, "", frozenset({root})):
            reached.setdefault(path, set()).add(namespace)
    for path, refusal in refused.items():
        directory = posixpath.dirname(path)
        prefix = f"{directory}/" if directory else ""
        blocked[prefix] = refusal
    return reached, blocked


def _blocked_by(path: str, blocked: Mapping[str, IntentRefusal]) -> IntentRefusal | None:
    for prefix, refusal in blocked.items():
        if path.startswith(prefix):
            return refusal
    return None


@dataclass(frozen=True, slots=True)
class _Entry:
    """One document of a file that names an object, with the namespace it writes itself."""

    document: int
    group: str
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class _Parsed:
    """What one file holds, parsed once per content: its object documents, how many documents it
    has, who owns it, or why it could not be read."""

    entries: tuple[_Entry, ...] = ()
    documents: int = 0
    owner: str | None = None
    unreadable: IntentRefusal | None = None


def _parse(path: str, data: bytes) -> _Parsed:
    owner = owner_of(path, data)
    try:
        documents = split_file(data, path).documents
        loaded = [yaml.load(d.text, Loader=_LOADER) for d in documents]
    except IntentRefusal as unreadable:
        return _Parsed(owner=owner, unreadable=unreadable)
    except (yaml.YAMLError, ValueError) as exc:
        # ValueError: a scalar its tag cannot hold (`2024-02-30`, `!!int x`)
        detail = f"{path}: {(str(exc).splitlines() or [type(exc).__name__])[0]}"
        return _Parsed(owner=owner, unreadable=IntentRefusal(RefusalReason.INVALID_YAML, detail))
    entries = [_entry(document.index, value) for document, value in zip(documents, loaded, strict=True)]
    written = sum(not d.is_empty for d in documents)
    return _Parsed(tuple(e for e in entries if e is not None), written, owner)


def _entry(document: int, value: object) -> _Entry | None:
    """The object a document names, or None when it names none."""
    if not isinstance(value, Mapping):
        return None
    metadata = value.get("metadata")
    api_version, kind = value.get("apiVersion"), value.get("kind")
    if not (isinstance(metadata, Mapping) and isinstance(api_version, str) and isinstance(kind, str)):
        return None
    name = metadata.get("name")
    if not isinstance(name, str):
        return None
    own = metadata.get("namespace")
    # kinds, groups and namespaces repeat over thousands of files: one string each, not one per file
    namespace = sys.intern(own) if isinstance(own, str) else ""
    return _Entry(document, sys.intern(_group(api_version)), sys.intern(kind), namespace, name)


def _rendered(path: str, data: bytes, obj: Mapping[str, Any]) -> _Parsed:
    """What `_parse` reads from `data` when it is the canonical rendering of `obj` alone
    (`pipeline.commit.yamlrender`): one document, naming what `obj` names. The worker's own
    writes are indexed from the object in hand: reading back each file it just rendered was a
    quarter of a first sync's CPU."""
    entry = _entry(0, obj)
    return _Parsed(() if entry is None else (entry,), 1, owner_of(path, data))


def _compact(parsed: _Parsed) -> _Parsed | ObjectKey:
    """`parsed` as `FolderIndex` holds it: the key of its one object when it is a plain file of
    one document naming one object (`_expand` gives the `_Parsed` back)."""
    if (
        parsed.documents == 1
        and len(parsed.entries) == 1
        and parsed.entries[0].document == 0
        and parsed.owner is None
        and parsed.unreadable is None
    ):
        entry = parsed.entries[0]
        return ObjectKey(entry.group, entry.kind, entry.namespace, entry.name)
    return parsed


def _expand(key: ObjectKey) -> _Parsed:
    return _Parsed((_Entry(0, key.group, key.kind, key.namespace, key.name),), 1)


class FolderIndex:
    """The homes of one target folder, kept current file by file.

    The commit worker builds it once from the branch's tree and then hands it each file it (or a
    rebase) changed: a changed file is parsed alone; a changed kustomization re-derives which files
    it reaches and with which namespace from the files already parsed, without reading them again.
    `files` holds the content of every YAML file under the folder, which the planner edits: with a
    `reader` (the branch's object store), files whose blob is stored are kept as blob ids
    (`pipeline.intent.files`), so the index does not hold a copy of the branch's content.
    """

    __slots__ = ("_blocked", "_parsed", "_prefix", "_reached", "_reader", "files", "index")

    def __init__(self, target_path: str = "", reader: BlobReader | None = None) -> None:
        self._prefix = f"{target_path.rstrip('/')}/" if target_path else ""
        self._reader = reader
        self.files = FolderFiles(reader)
        self.index = HomeIndex()
        # What each file holds, parsed. A file of one document naming one object in its own
        # namespace (the worker's own files: nearly every file after a first sync) is held as that
        # object's key, the one its home is indexed under, instead of a `_Parsed` of its own.
        self._parsed: dict[str, _Parsed | ObjectKey] = {}
        self._reached: dict[str, set[str]] = {}
        self._blocked: dict[str, IntentRefusal] = {}

    def covers(self, path: str) -> bool:
        """Whether `path` is a file this index reads: YAML or a kustomization under the folder."""
        return path.startswith(self._prefix) and (
            path.endswith(_YAML_SUFFIXES) or is_kustomization_file(path)
        )

    def load(self, files: Mapping[str, bytes]) -> Steps[None]:
        """Index `files` (repository path to content); paths this index does not cover are ignored.

        One step per file (each is parsed): a worker that starts on a large branch reads every
        file of its folders, in slices (`pipeline.slices`).
        """
        yield from self._load((path, files[path], None) for path in files)

    def load_stored(self, blobs: Mapping[str, bytes]) -> Steps[None]:
        """Index the files `blobs` names (repository path to blob id), each read through the
        folder's reader once to be parsed and then kept as its id; one step per file."""
        reader = self._reader
        assert reader is not None, "a folder without a reader holds content, see load()"
        yield from self._load((path, None, blob) for path, blob in blobs.items())

    def _load(self, files: Iterator[tuple[str, bytes | None, bytes | None]]) -> Steps[None]:
        """Index (path, content or None to read it, blob id or None) in path order."""
        self.files = FolderFiles(self._reader)
        self._parsed = {}
        self.index.kustomizations.clear()
        self.index.refused_kustomizations.clear()
        for path, held, blob in sorted((f for f in files if self.covers(f[0])), key=lambda f: f[0]):
            yield
            if held is None:
                assert self._reader is not None
                assert blob is not None
                data = self._reader.read(blob)
            else:
                data = held
            self.files.put(path, data, blob)
            if is_kustomization_file(path):
                self._read_kustomization(path, data)
            else:
                self._parsed[path] = _compact(_parse(path, data))
        yield from self._assemble()

    def update(
        self,
        path: str,
        data: bytes | None,
        blob: bytes | None = None,
        holds: Mapping[str, Any] | None = None,
    ) -> None:
        """`path` now holds `data` (None: it is gone); `blob` is its id when the store holds it;
        `holds` is the object `data` is the canonical rendering of, when it is one (then the file
        is not parsed)."""
        if not self.covers(path):
            return
        if data is None:
            if path not in self.files:
                return
            self.files.remove(path)
        else:
            stored = self.files.blob(path)
            # a stored file is compared by id (a planned write, without one, is taken as a change)
            unchanged = blob == stored if stored is not None else self.files.get(path) == data
            self.files.put(path, data, blob)
            if unchanged:
                return
        if is_kustomization_file(path):
            self.index.kustomizations.pop(posixpath.dirname(path), None)
            self.index.refused_kustomizations.pop(path, None)
            if data is not None:
                self._read_kustomization(path, data)
            finish(self._assemble())
            return
        before = self._parsed.get(path)
        self._unindex(path)
        if data is None:
            self._parsed.pop(path, None)
            return
        parsed = _compact(_parse(path, data) if holds is None else _rendered(path, data, holds))
        # a file that names the same object again keeps the key it was indexed under: the object's
        # state-book entry shares that key's name, an equal copy would hold a second one
        self._parsed[path] = before if isinstance(parsed, ObjectKey) and parsed == before else parsed
        self._index(path)

    def documents(self, path: str) -> int:
        """How many documents with content the file at `path` holds (0 when it is not indexed)."""
        parsed = self._parsed.get(path)
        return 0 if parsed is None else 1 if isinstance(parsed, ObjectKey) else parsed.documents

    def _read_kustomization(self, path: str, data: bytes) -> None:
        try:
            self.index.kustomizations[posixpath.dirname(path)] = parse_kustomization(path, data)
        except IntentRefusal as unmodelled:
            self.index.refused_kustomizations[path] = unmodelled

    def _assemble(self) -> Steps[None]:
        """Every file's homes again, from the parsed files and the current kustomizations; one
        step per file."""
        index = self.index
        index.homes.clear()
        index.group_kinds.clear()
        index.unreadable.clear()
        self._reached, self._blocked = _namespaces(index.kustomizations, index.refused_kustomizations)
        for path in sorted(self._parsed):
            yield
            self._index(path)

    def _claims(self, path: str) -> Iterator[tuple[ObjectKey, int, str]]:
        """The keys `path`'s documents are indexed under, each with its document and the namespace
        the document writes itself; derived again when the file is unindexed, so the index keeps
        no list of them (`_reached` changes only in `_assemble`, which indexes every file anew)."""
        held = self._parsed.get(path)
        if held is None:
            return
        if isinstance(held, ObjectKey):
            if not self._reached.get(path):
                yield held, 0, held.namespace
                return
            held = _expand(held)
        namespaces = self._reached.get(path, set())
        for entry in held.entries:
            rendered = {n or entry.namespace for n in namespaces} or {entry.namespace}
            for namespace in sorted(rendered):
                yield (
                    ObjectKey(entry.group, entry.kind, namespace, entry.name),
                    entry.document,
                    entry.namespace,
                )

    def _unindex(self, path: str) -> None:
        for key, _document, _own in self._claims(path):
            self.index.drop(key, path)
        if any(u.path == path for u in self.index.unreadable):
            self.index.unreadable = [u for u in self.index.unreadable if u.path != path]

    def _index(self, path: str) -> None:
        held = self._parsed[path]
        parsed = _expand(held) if isinstance(held, ObjectKey) else held
        if parsed.unreadable is not None:
            self.index.unreadable.append(Unreadable(path, parsed.unreadable))
            return
        namespaces = self._reached.get(path, set())
        refusal = (
            IntentRefusal(RefusalReason.OWNED_ELSEWHERE, parsed.owner)
            if parsed.owner
            else _blocked_by(path, self._blocked)
        )
        if refusal is None and len(namespaces) > 1:
            refusal = IntentRefusal(
                RefusalReason.SHARED_BASE, f"{path} is a base that {len(namespaces)} render roots share"
            )
        for key, document, own in self._claims(path):
            source = (
                NamespaceSource.KUSTOMIZATION
                if key.namespace and key.namespace != own
                else NamespaceSource.DOCUMENT
                if key.namespace
                else NamespaceSource.NONE
            )
            self.index.add(key, Home(path, document, source, refusal))


def build_index(files: Mapping[str, bytes], target_path: str = "") -> HomeIndex:
    """The homes of the objects in `files` (repository path to content) under `target_path`."""
    folder = FolderIndex(target_path)
    finish(folder.load(files))
    return folder.index
