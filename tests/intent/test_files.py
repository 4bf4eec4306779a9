"""`FolderFiles`: content held as bytes, or as blob ids read back through a store."""

from __future__ import annotations

import hashlib

import pytest

from pipeline.intent.files import FolderFiles


class Blobs:
    """A dictionary blob store that counts its reads (the commit worker uses the Git object store)."""

    def __init__(self) -> None:
        self.blobs: dict[bytes, bytes] = {}
        self.reads = 0

    def store(self, data: bytes) -> bytes:
        sha = hashlib.sha1(data).digest()
        self.blobs[sha] = data
        return sha

    def read(self, sha: bytes) -> bytes:
        self.reads += 1
        return self.blobs[sha]


def test_without_a_reader_every_file_is_held_even_with_a_blob_id() -> None:
    held = FolderFiles()
    held.put("a.yaml", b"a: 1\n", b"\x01" * 20)
    assert held["a.yaml"] == b"a: 1\n"
    assert held.blob("a.yaml") is None
    assert held.held_bytes == 5


def test_with_a_reader_a_stored_file_is_kept_as_its_id_and_read_back() -> None:
    blobs = Blobs()
    held = FolderFiles(blobs)
    held.put("a.yaml", b"a: 1\n", blobs.store(b"a: 1\n"))
    held.put("b.yaml", b"b: 2\n")  # planned, not stored yet: held
    assert held.held_bytes == 5
    assert held.blob("a.yaml") == blobs.store(b"a: 1\n")
    assert held["a.yaml"] == b"a: 1\n"
    assert blobs.reads == 1
    assert held["b.yaml"] == b"b: 2\n"
    assert blobs.reads == 1
    assert sorted(held) == ["a.yaml", "b.yaml"]
    assert len(held) == 2
    assert "a.yaml" in held
    assert "c.yaml" not in held

    held.put("b.yaml", b"b: 2\n", blobs.store(b"b: 2\n"))  # committed: its id replaces the bytes
    assert held.held_bytes == 0
    held.put("a.yaml", b"a: 3\n")  # a new planned content replaces the id
    assert held.blob("a.yaml") is None
    assert held["a.yaml"] == b"a: 3\n"
    assert len(held) == 2


def test_a_removed_or_unknown_file_is_absent() -> None:
    blobs = Blobs()
    held = FolderFiles(blobs)
    held.put("a.yaml", b"a: 1\n", blobs.store(b"a: 1\n"))
    held.remove("a.yaml")
    held.remove("never.yaml")
    assert len(held) == 0
    with pytest.raises(KeyError):
        held["a.yaml"]
    assert held.get("a.yaml") is None
