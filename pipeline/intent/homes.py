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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from pipeline.intent.documents import IntentRefusal, RefusalReason, split_file
from pipeline.intent.kustomization import Kustomization, is_kustomization_file, parse_kustomization

__all__ = [
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


@dataclass(slots=True)
class HomeIndex:
    homes: dict[ObjectKey, list[Home]] = field(default_factory=dict)
    kustomizations: dict[str, Kustomization] = field(default_factory=dict)
    refused_kustomizations: dict[str, IntentRefusal] = field(default_factory=dict)
    unreadable: list[Unreadable] = field(default_factory=list)

    def home_of(self, key: ObjectKey) -> Home | None:
        """The one home of `key`; raises IntentRefusal when two documents claim it or it may not be
        edited. A document without a namespace is the home of a namespaced object when nothing
        else claims it (the namespace then comes from whatever applies the folder)."""
        homes = self.homes.get(key)
        if not homes and key.namespace:
            homes = self.homes.get(ObjectKey(key.group, key.kind, "", key.name))
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
        return frozenset(h.path for homes in self.homes.values() for h in homes)


def _describe(key: ObjectKey) -> str:
    kind = f"{key.kind}.{key.group}" if key.group else key.kind
    return f"{kind} {key.namespace}/{key.name}" if key.namespace else f"{kind} {key.name}"


def owner_of(path: str, data: bytes) -> str | None:
    """The reason `path` belongs to another tool, or None when a person keeps it."""
    if posixpath.basename(path) in _FOREIGN_FILES:
        return f"{path} is written by Flux"
    head = data[:4096].decode("utf-8", "replace").splitlines()[:_HEADER_LINES]
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
    referenced = {
        entry for k in kustomizations.values() for entry in k.resources if entry in kustomizations
    }
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


def build_index(files: Mapping[str, bytes], target_path: str = "") -> HomeIndex:
    """The homes of the objects in `files` (repository path to content) under `target_path`."""
    prefix = f"{target_path.rstrip('/')}/" if target_path else ""
    inside = {p: d for p, d in files.items() if p.startswith(prefix)}
    index = HomeIndex()
    for path, data in sorted(inside.items()):
        if is_kustomization_file(path):
            try:
                index.kustomizations[posixpath.dirname(path)] = parse_kustomization(path, data)
            except IntentRefusal as unmodelled:
                index.refused_kustomizations[path] = unmodelled
    reached, blocked = _namespaces(index.kustomizations, index.refused_kustomizations)
    for path, data in sorted(inside.items()):
        if not path.endswith(_YAML_SUFFIXES) or is_kustomization_file(path):
            continue
        owner = owner_of(path, data)
        refusal = (
            IntentRefusal(RefusalReason.OWNED_ELSEWHERE, owner) if owner else _blocked_by(path, blocked)
        )
        namespaces = reached.get(path, set())
        if refusal is None and len(namespaces) > 1:
            refusal = IntentRefusal(
                RefusalReason.SHARED_BASE, f"{path} is a base that {len(namespaces)} render roots share"
            )
        _index_file(index, path, data, namespaces, refusal)
    return index


def _index_file(
    index: HomeIndex, path: str, data: bytes, namespaces: set[str], refusal: IntentRefusal | None
) -> None:
    try:
        documents = split_file(data, path).documents
        loaded = [yaml.load(d.text, Loader=_LOADER) for d in documents]
    except IntentRefusal as unreadable:
        index.unreadable.append(Unreadable(path, unreadable))
        return
    except yaml.YAMLError as exc:
        detail = f"{path}: {str(exc).splitlines()[0]}"
        index.unreadable.append(Unreadable(path, IntentRefusal(RefusalReason.INVALID_YAML, detail)))
        return
    for document, value in zip(documents, loaded, strict=True):
        if not isinstance(value, Mapping):
            continue
        metadata = value.get("metadata")
        api_version, kind = value.get("apiVersion"), value.get("kind")
        if not (isinstance(metadata, Mapping) and isinstance(api_version, str) and isinstance(kind, str)):
            continue
        name = metadata.get("name")
        if not isinstance(name, str):
            continue
        own = metadata.get("namespace")
        own_namespace = own if isinstance(own, str) else ""
        rendered = {n or own_namespace for n in namespaces} or {own_namespace}
        for namespace in sorted(rendered):
            source = (
                NamespaceSource.KUSTOMIZATION
                if namespace and namespace != own_namespace
                else NamespaceSource.DOCUMENT if namespace else NamespaceSource.NONE
            )
            key = ObjectKey(_group(api_version), kind, namespace, name)
            index.homes.setdefault(key, []).append(Home(path, document.index, source, refusal))
