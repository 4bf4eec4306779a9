"""A commit as the worker reads it back: its tree, parents, identities and trailers.

A value, apart from the Git that produced it (`git/repo.py` reads one), so the decisions that look
at commits (a CommitRequest's redelivery, `pipeline.commit.flush`) stay pure and are tested
without a repository.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CommitInfo"]

_TRAILER = re.compile(r"^([A-Za-z0-9-]+): (.*)$")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """What the worker reads back from a commit: its tree, parents, author, committer and trailers."""

    sha: str
    tree: bytes
    parents: tuple[str, ...]
    author: str
    message: str
    committer: str = ""

    def trailers(self) -> dict[str, list[str]]:
        """Trailer lines of the message's last paragraph, by key."""
        found: dict[str, list[str]] = {}
        last = self.message.rstrip("\n").rsplit("\n\n", 1)[-1]
        for line in last.splitlines():
            match = _TRAILER.match(line)
            if match:
                found.setdefault(match.group(1), []).append(match.group(2))
        return found
