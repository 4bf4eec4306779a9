"""Which files a sweep may delete: only a document that really is the object its path names.

Mark-and-sweep, a retired target's `removeFiles` and a rebuild's unlisted documents find their
deletions by listing a folder, not from a change in the cluster. A file there that does not parse,
holds several documents, or names another object is a user's file that merely sits at an object's
path: deleting it would destroy work the cluster never had, so it is kept and counted instead
(docs/commit-worker.md, "Prune matrix").
"""

from __future__ import annotations

from typing import Any

import yaml

from pipeline.commit.layout import SEALED_SUFFIX

__all__ = ["holds_its_object"]

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DOCUMENT_SUFFIX = ".yaml"


def _name_of(path: str) -> str | None:
    file_name = path.rsplit("/", 1)[-1]
    for suffix in (SEALED_SUFFIX, _DOCUMENT_SUFFIX):
        if file_name.endswith(suffix):
            return file_name[: -len(suffix)]
    return None


def holds_its_object(content: bytes, path: str) -> bool:
    """Whether `content` is one Kubernetes object document whose `metadata.name` is the file's name.

    Sealed documents (SOPS) qualify too: their `metadata` stays readable.
    """
    name = _name_of(path)
    if not name:
        return False
    try:
        documents = [d for d in yaml.load_all(content, Loader=_LOADER) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return False
    if len(documents) != 1 or not isinstance(documents[0], dict):
        return False
    document = documents[0]
    metadata = document.get("metadata")
    return (
        isinstance(document.get("apiVersion"), str)
        and isinstance(document.get("kind"), str)
        and isinstance(metadata, dict)
        and metadata.get("name") == name
    )
