"""New Git objects kept in memory and written to the repository as one pack per push.

GitPython's `GitCmdObjectDB.store` runs `git hash-object` per object, and loose objects cost a
file create and rename each; at one blob, a few trees and a commit per change that caps a worker at
a few dozen commits per second. Unpushed objects need no durability (the log is the source of
truth and a restart rebuilds them), so they are hashed and held in memory and handed to
`git index-pack` in one go right before a push.
"""

from __future__ import annotations

import hashlib
import subprocess
import zlib
from pathlib import Path
from typing import Any

__all__ = ["ObjectStore"]

_TYPE_CODES = {b"commit": 1, b"tree": 2, b"blob": 3}


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
        body = bytearray(b"PACK" + (2).to_bytes(4, "big") + len(self._new).to_bytes(4, "big"))
        for kind, data in self._new.values():
            body += _pack_header(_TYPE_CODES[kind], len(data))
            body += zlib.compress(data, 1)
        body += hashlib.sha1(body, usedforsecurity=False).digest()
        subprocess.run(
            ["git", "-C", str(self._path), "index-pack", "--stdin"],
            input=bytes(body),
            check=True,
            capture_output=True,
        )
        self._new.clear()
        return True
