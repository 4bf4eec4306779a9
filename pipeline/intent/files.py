"""The content of a target folder's YAML files, kept as blob ids where a blob store holds them.

The planner edits a user's file from its current content, so the commit worker keeps every YAML
file of its target folders at hand (`pipeline.intent.homes.FolderIndex`). Holding the bytes made
the branch's whole content resident for as long as the worker runs: after a first sync that is
one copy of every object the branch mirrors (issue 32). A file whose content is already in the
branch's Git object store is kept as its 20-byte blob id and read back when the planner asks for
it; a file only known by content (a write planned but not committed yet, or a folder indexed
without a store) is held as bytes until its blob is stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

__all__ = ["BlobReader", "FolderFiles"]


class BlobReader(Protocol):
    """Reads a blob back by its Git object id (`pipeline.commit.git.objstore.ObjectStore` is one)."""

    def read(self, sha: bytes) -> bytes: ...


class FolderFiles(Mapping[str, bytes]):
    """Path to content: stored files as blob ids read through `reader`, the others held as bytes."""

    __slots__ = ("_held", "_reader", "_stored")

    def __init__(self, reader: BlobReader | None = None) -> None:
        self._reader = reader
        self._held: dict[str, bytes] = {}
        self._stored: dict[str, bytes] = {}

    def __getitem__(self, path: str) -> bytes:
        held = self._held.get(path)
        if held is not None:
            return held
        blob = self._stored[path]
        assert self._reader is not None  # only a folder with a reader stores ids
        return self._reader.read(blob)

    def __contains__(self, path: object) -> bool:
        return path in self._held or path in self._stored

    def __iter__(self) -> Iterator[str]:
        yield from self._held
        yield from self._stored

    def __len__(self) -> int:
        return len(self._held) + len(self._stored)

    @property
    def held_bytes(self) -> int:
        """Bytes of content held in memory (files whose blob is not known to be stored)."""
        return sum(len(data) for data in self._held.values())

    def blob(self, path: str) -> bytes | None:
        """The blob id `path` is kept as, or None when it is held as bytes or absent."""
        return self._stored.get(path)

    def put(self, path: str, data: bytes, blob: bytes | None = None) -> None:
        """`path` holds `data`; with `blob` (its id, in the store) and a reader, only the id is kept."""
        if blob is not None and self._reader is not None:
            self._held.pop(path, None)
            self._stored[path] = blob
        else:
            self._stored.pop(path, None)
            self._held[path] = data

    def remove(self, path: str) -> None:
        """`path` is gone."""
        self._held.pop(path, None)
        self._stored.pop(path, None)
