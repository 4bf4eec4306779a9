"""New Git objects kept in memory and written to the repository as one pack per push.

GitPython's `GitCmdObjectDB.store` runs `git hash-object` per object, and loose objects cost a
file create and rename each; at one blob, a few trees and a commit per change that caps a worker at
a few dozen commits per second. Unpushed objects need no durability (the log is the source of
truth and a restart rebuilds them), so they are hashed and held in memory and written as one pack
right before a push. The pack's index (version 2) is written here too, from the ids and offsets
already known: `git index-pack` would inflate and hash every object again, which costs as much as
building the pack (a rebuild writes thousands of objects at once). The files are named and
placed as git names them (`objects/pack/pack-<checksum>.pack|.idx`), the index last, so git
never sees a pack without its index; tests run `git fsck --strict` and `git verify-pack` on them.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import Any

__all__ = ["ObjectStore", "pack_index"]

_TYPE_CODES = {b"commit": 1, b"tree": 2, b"blob": 3}
PACK_VERSION = 2
IDX_MAGIC = b"\377tOc"
IDX_VERSION = 2
# offsets at or above this go to the index's 64-bit table (the 32-bit slot holds its position)
LARGE_OFFSET = 0x8000_0000


def object_id(kind: bytes, data: bytes) -> bytes:
    """Git's SHA-1 object id of `data` stored as `kind`."""
    return hashlib.sha1(b"%s %d\x00" % (kind, len(data)) + data, usedforsecurity=False).digest()


def _pack_header(type_code: int, size: int) -> bytes:
    byte = (type_code << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


class ObjectStore:
    """Reads through to the repository's object database; writes stay in memory until `flush`."""

    __slots__ = ("_new", "_odb", "_path")

    def __init__(self, repo_path: Path, odb: Any) -> None:
        self._path = repo_path
        self._odb = odb
        self._new: dict[bytes, tuple[bytes, bytes]] = {}

    def write(self, kind: bytes, data: bytes) -> bytes:
        sha = object_id(kind, data)
        self._new.setdefault(sha, (kind, data))
        return sha

    def read(self, sha: bytes) -> bytes:
        held = self._new.get(sha)
        if held is not None:
            return held[1]
        data: bytes = self._odb.stream(sha).read()
        return data

    @property
    def unflushed(self) -> int:
        return len(self._new)

    def discard(self) -> None:
        """Forget unflushed objects (their commits were replaced after a conflict)."""
        self._new.clear()

    def flush(self) -> bool:
        """Write every held object into the repository as one pack; returns whether one was written."""
        if not self._new:
            return False
        body = bytearray(b"PACK" + PACK_VERSION.to_bytes(4, "big") + len(self._new).to_bytes(4, "big"))
        entries: list[tuple[bytes, int, int]] = []
        for sha, (kind, data) in self._new.items():
            entry = _pack_header(_TYPE_CODES[kind], len(data)) + zlib.compress(data, 1)
            entries.append((sha, zlib.crc32(entry), len(body)))
            body += entry
        checksum = hashlib.sha1(body, usedforsecurity=False).digest()
        body += checksum
        pack_dir = self._path / "objects" / "pack"
        pack_dir.mkdir(parents=True, exist_ok=True)
        base = pack_dir / f"pack-{checksum.hex()}"
        _write_atomically(base.with_suffix(".pack"), bytes(body))
        _write_atomically(base.with_suffix(".idx"), pack_index(entries, checksum))
        self._new.clear()
        return True


def pack_index(entries: list[tuple[bytes, int, int]], pack_checksum: bytes) -> bytes:
    """A version 2 pack index of (object id, CRC32 of the packed entry, offset) triples."""
    entries.sort()
    fanout = [0] * 256
    for sha, _crc, _offset in entries:
        fanout[sha[0]] += 1
    out = bytearray(IDX_MAGIC + IDX_VERSION.to_bytes(4, "big"))
    total = 0
    for count in fanout:
        total += count
        out += total.to_bytes(4, "big")
    out += b"".join(sha for sha, _crc, _offset in entries)
    out += b"".join(crc.to_bytes(4, "big") for _sha, crc, _offset in entries)
    large: list[int] = []
    for _sha, _crc, offset in entries:
        if offset < LARGE_OFFSET:
            out += offset.to_bytes(4, "big")
        else:
            out += (LARGE_OFFSET | len(large)).to_bytes(4, "big")
            large.append(offset)
    out += b"".join(offset.to_bytes(8, "big") for offset in large)
    out += pack_checksum
    out += hashlib.sha1(out, usedforsecurity=False).digest()
    return bytes(out)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` under a temporary name and rename it into place (git's pack files are read-only)."""
    tmp = path.with_name(f"tmp_{path.name}")
    tmp.write_bytes(data)
    tmp.chmod(0o444)
    os.replace(tmp, path)
