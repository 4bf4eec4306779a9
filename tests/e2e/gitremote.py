"""A real bare Git remote on local disk, read back the way a reviewer would read the history.

The commit worker pushes here over `file://`; the tests only ever look at what was pushed, never at
the worker's clone, so they see exactly what an operator's Git server would.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Commit", "GitRemote"]

POLL_INTERVAL_S = 0.5
_RECORD = "\x1e"
_FIELD = "\x1f"


@dataclass(frozen=True, slots=True)
class Commit:
    """One pushed commit: identity, message, trailers and the files it touched."""

    sha: str
    author_name: str
    author_email: str
    committer_name: str
    message: str
    trailers: dict[str, list[str]]
    # (status, path) pairs from `--name-status`: A(dded), M(odified), D(eleted).
    changes: tuple[tuple[str, str], ...]

    @property
    def subject(self) -> str:
        return self.message.splitlines()[0] if self.message else ""

    def touched(self, path_prefix: str) -> list[tuple[str, str]]:
        return [(status, path) for status, path in self.changes if path.startswith(path_prefix)]


def _parse_trailers(text: str) -> dict[str, list[str]]:
    trailers: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and " " not in key:
            trailers.setdefault(key, []).append(value.strip())
    return trailers


class GitRemote:
    """A bare repository at `path`, with the default branch `main`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)], check=True)

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(self.path), *args], check=True, capture_output=True, text=True
        ).stdout

    def head(self, branch: str = "main") -> str | None:
        """The branch tip, or None while nothing has been pushed to it."""
        result = subprocess.run(
            ["git", "--git-dir", str(self.path), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
            capture_output=True,
            text=True,
        )
        return result.stdout.strip() or None

    def commits(self, branch: str = "main", since: str | None = None) -> list[Commit]:
        """Pushed commits, oldest first; only those after `since` when given."""
        if self.head(branch) is None:
            return []
        revision = f"{since}..refs/heads/{branch}" if since else f"refs/heads/{branch}"
        fmt = _FIELD.join(["%H", "%an", "%ae", "%cn", "%B", "%(trailers:only,unfold)"]) + _FIELD
        out = self._git(
            "log", "--reverse", "--no-renames", f"--format={_RECORD}{fmt}", "--name-status", revision
        )
        commits = []
        for record in out.split(_RECORD)[1:]:
            sha, author, email, committer, message, trailers, status = record.split(_FIELD)
            changes = tuple(
                (parts[0], parts[1])
                for parts in (line.split("\t") for line in status.strip().splitlines())
                if len(parts) == 2
            )
            commits.append(
                Commit(sha, author, email, committer, message.strip(), _parse_trailers(trailers), changes)
            )
        return commits

    def files(self, branch: str = "main") -> dict[str, str]:
        """Every file at the branch tip, path to content."""
        # One commit for every read: the worker may push between two git calls.
        tip = self.head(branch)
        if tip is None:
            return {}
        paths = self._git("ls-tree", "-r", "--name-only", tip).splitlines()
        return {path: self._git("show", f"{tip}:{path}") for path in paths}

    def wait_for(self, predicate: Callable[[GitRemote], bool], timeout_s: float, what: str) -> None:
        """Poll until `predicate(self)` holds; fail naming `what` and the history seen so far."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            if time.monotonic() >= deadline:
                seen = "\n".join(f"  {c.author_name}: {c.subject} {list(c.changes)}" for c in self.commits())
                raise AssertionError(
                    f"timed out after {timeout_s:.0f} s waiting for {what}; history:\n{seen}"
                )
            time.sleep(POLL_INTERVAL_S)
