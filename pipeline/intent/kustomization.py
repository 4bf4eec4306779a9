"""A kustomization as far as the pipeline models it, and a refusal by name for everything else.

The commit worker may edit a folder that kustomize renders only when it can say what the render
will be after the edit. It models `resources:` (local files and folders), `namespace:`,
`images:` and `replicas:` entries, labels and annotations added to every object, and patches that
live in files. Every other transformer changes names, contents or the set of objects in ways an
edit would have to reproduce: generators, components, name prefixes and suffixes, replacements,
vars, Helm charts, plugins, JSON 6902 and inline patches, and remote bases. A kustomization that
uses one is refused with the field named, before anything is written.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from pipeline.intent.documents import IntentRefusal, RefusalReason

__all__ = [
    "KUSTOMIZATION_FILES",
    "UNSUPPORTED_FIELDS",
    "ImageEntry",
    "Kustomization",
    "ReplicaEntry",
    "is_kustomization_file",
    "is_remote",
    "parse_kustomization",
]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

_MODELLED = frozenset(
    {
        "apiVersion",
        "kind",
        "metadata",
        "namespace",
        "resources",
        "bases",
        "images",
        "replicas",
        "labels",
        "commonLabels",
        "commonAnnotations",
        "patches",
        "patchesStrategicMerge",
        "buildMetadata",
        "sortOptions",
    }
)

UNSUPPORTED_FIELDS: Mapping[str, str] = {
    "configMapGenerator": "a generator makes objects no file holds",
    "secretGenerator": "a generator makes objects no file holds",
    "generators": "generator plugins make objects no file holds",
    "generatorOptions": "it changes generated names",
    "components": "a component's edits would have to be reproduced",
    "namePrefix": "it renames every object",
    "nameSuffix": "it renames every object",
    "replacements": "it copies values between objects",
    "vars": "it substitutes values into objects",
    "helmCharts": "a Helm chart renders objects no file holds",
    "helmGlobals": "a Helm chart renders objects no file holds",
    "helmChartInflationGenerator": "a Helm chart renders objects no file holds",
    "transformers": "transformer plugins change objects in ways not modelled",
    "validators": "validator plugins are not run",
    "patchesJson6902": "JSON 6902 patches are not modelled",
    "openapi": "a custom schema changes how patches merge",
    "crds": "custom merge keys change how patches merge",
    "configurations": "custom transformer configurations are not modelled",
}
"""Fields refused, each with why; anything neither here nor modelled is refused as unknown."""

_REMOTE_PREFIXES = ("http://", "https://", "git@", "ssh://", "git::", "github.com/", "gitlab.com/", "oci://")


@dataclass(frozen=True, slots=True)
class ImageEntry:
    """An `images:` entry: objects using image `name` get `new_name`, `new_tag` or `digest`."""

    name: str
    new_name: str = ""
    new_tag: str = ""
    digest: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    """A `replicas:` entry: the workload called `name` gets `count` replicas."""

    name: str
    count: int


@dataclass(frozen=True, slots=True)
class Kustomization:
    """The modelled part of one kustomization file; paths are repository paths, normalised."""

    path: str
    namespace: str
    resources: tuple[str, ...]
    patch_files: tuple[str, ...]
    images: tuple[ImageEntry, ...]
    replicas: tuple[ReplicaEntry, ...]

    @property
    def directory(self) -> str:
        return posixpath.dirname(self.path)


def is_kustomization_file(path: str) -> bool:
    return posixpath.basename(path) in KUSTOMIZATION_FILES


def is_remote(entry: str) -> bool:
    """Whether a `resources:` entry names something outside the repository (fetched at build time)."""
    return entry.startswith(_REMOTE_PREFIXES) or "?ref=" in entry or "//" in entry


def _refuse(path: str, detail: str) -> IntentRefusal:
    return IntentRefusal(RefusalReason.UNSUPPORTED_KUSTOMIZE, f"{path}: {detail}", path)


def _strings(value: Any, path: str, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _refuse(path, f"{field} must be a list of paths")
    return list(value)


def _local(directory: str, entry: str, path: str, field: str) -> str:
    if is_remote(entry):
        raise _refuse(path, f"{field} entry {entry!r} is a remote base (remote bases are never fetched)")
    joined = posixpath.normpath(posixpath.join(directory, entry))
    if joined.startswith("../") or joined == ".." or posixpath.isabs(entry):
        raise _refuse(path, f"{field} entry {entry!r} is outside the repository")
    return "" if joined == "." else joined


def _images(value: Any, path: str) -> tuple[ImageEntry, ...]:
    entries = []
    for item in value or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise _refuse(path, "every images entry needs a name")
        entries.append(
            ImageEntry(
                name=item["name"],
                new_name=str(item.get("newName") or ""),
                new_tag=str(item.get("newTag") or ""),
                digest=str(item.get("digest") or ""),
            )
        )
    return tuple(entries)


def _replicas(value: Any, path: str) -> tuple[ReplicaEntry, ...]:
    entries = []
    for item in value or []:
        if (
            not isinstance(item, Mapping)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("count"), int)
        ):
            raise _refuse(path, "every replicas entry needs a name and an integer count")
        entries.append(ReplicaEntry(item["name"], item["count"]))
    return tuple(entries)


def _patch_files(data: Mapping[str, Any], directory: str, path: str) -> tuple[str, ...]:
    files = []
    for item in data.get("patches") or []:
        if not isinstance(item, Mapping) or "patch" in item or not isinstance(item.get("path"), str):
            raise _refuse(path, "patches: only patches in a file (`path:`) are modelled, not inline ones")
        files.append(_local(directory, item["path"], path, "patches"))
    for item in data.get("patchesStrategicMerge") or []:
        if not isinstance(item, str) or "\n" in item:
            raise _refuse(path, "patchesStrategicMerge: inline patches are not modelled")
        files.append(_local(directory, item, path, "patchesStrategicMerge"))
    return tuple(files)


def parse_kustomization(path: str, data: bytes) -> Kustomization:
    """The kustomization at repository path `path`; raises IntentRefusal naming what is not modelled."""
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: not UTF-8, or `2024-02-30`
        raise IntentRefusal(
            RefusalReason.INVALID_YAML, f"{path}: {(str(exc).splitlines() or [type(exc).__name__])[0]}", path
        ) from None
    if not isinstance(loaded, Mapping):
        raise IntentRefusal(RefusalReason.NOT_A_MAPPING, f"{path}: a kustomization is a mapping", path)
    for field, why in UNSUPPORTED_FIELDS.items():
        if loaded.get(field):
            raise _refuse(path, f"{field} is not supported: {why}")
    unknown = sorted(set(loaded) - _MODELLED - set(UNSUPPORTED_FIELDS))
    if unknown:
        raise _refuse(path, f"{', '.join(unknown)} not modelled")
    directory = posixpath.dirname(path)
    entries = _strings(loaded.get("resources"), path, "resources")
    entries += _strings(loaded.get("bases"), path, "bases")
    namespace = loaded.get("namespace") or ""
    if not isinstance(namespace, str):
        raise _refuse(path, "namespace must be a string")
    return Kustomization(
        path=path,
        namespace=namespace,
        resources=tuple(_local(directory, e, path, "resources") for e in entries),
        patch_files=_patch_files(loaded, directory, path),
        images=_images(loaded.get("images"), path),
        replicas=_replicas(loaded.get("replicas"), path),
    )
