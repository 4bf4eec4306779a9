"""Reading the pushed Git history back as per-file transitions, with the push that published each commit."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from pipeline.commit.notes import notes_ref, parse_late_lines
from pipeline.content.key import content_key
from pipeline.content.sanitize import sanitized_json
from tests.chaos.oracle import Transition
from tests.chaos.workload import fingerprint

__all__ = ["first_pushes", "read_files", "read_transitions", "version_keys"]

_RECORD = "\x1e"
_FIELD = "\x1f"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def first_pushes(repo: Path, pushes: Sequence[tuple[float, dict[str, str]]]) -> dict[str, float]:
    """Commit sha to the time of the first push after which a branch contained it."""
    seen: dict[str, str] = {}
    published: dict[str, float] = {}
    for at, refs in pushes:
        for ref, tip in refs.items():
            if seen.get(ref) == tip:
                continue
            exclude = [f"^{old}" for old in {seen.get(ref)} if old]
            for sha in _git(repo, "rev-list", tip, *exclude).split():
                published.setdefault(sha, at)
            seen[ref] = tip
    return published


def _load(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    return loaded if isinstance(loaded, dict) else {}


def read_transitions(
    repo: Path, branch: str, path_prefix: str, published: dict[str, float]
) -> list[Transition]:
    """Every change a commit on `branch` made to a file under `path_prefix`, oldest first."""
    if not _git(repo, "for-each-ref", f"refs/heads/{branch}").strip():
        return []
    out = _git(
        repo,
        "log",
        "--reverse",
        "--no-renames",
        f"--format={_RECORD}%H{_FIELD}%an{_FIELD}",
        "--name-status",
        f"refs/heads/{branch}",
        "--",
        path_prefix,
    )
    late = late_authors(repo, branch)
    transitions = []
    for record in out.split(_RECORD)[1:]:
        sha, author, status = record.split(_FIELD)
        for line in status.strip().splitlines():
            parts = line.split("\t")
            if len(parts) != 2:
                continue
            change, path = parts
            version = None if change == "D" else fingerprint(_load(_git(repo, "show", f"{sha}:{path}")))
            transitions.append(
                Transition(branch, path, version, sha, author, published.get(sha), late.get((sha, path)))
            )
    return transitions


def late_authors(repo: Path, branch: str) -> dict[tuple[str, str], str]:
    """(commit, path) to the author a late fact named in the branch's notes ref (its git note)."""
    ref = notes_ref(branch)
    if not _git(repo, "for-each-ref", ref).strip():
        return {}
    found: dict[tuple[str, str], str] = {}
    for line in _git(repo, "notes", f"--ref={ref}", "list").splitlines():
        _note, sha = line.split()
        for named in parse_late_lines(_git(repo, "notes", f"--ref={ref}", "show", sha)):
            found[(sha, named.path)] = named.name
    return found


def read_files(repo: Path, branch: str, path_prefix: str) -> dict[str, dict[str, Any]]:
    """The parsed YAML of every file under `path_prefix` at the tip of `branch`."""
    if not _git(repo, "for-each-ref", f"refs/heads/{branch}").strip():
        return {}
    tip = _git(repo, "rev-parse", f"refs/heads/{branch}").strip()
    paths = _git(repo, "ls-tree", "-r", "--name-only", tip, "--", path_prefix).split()
    return {path: _load(_git(repo, "show", f"{tip}:{path}")) for path in paths}


def version_keys(repo: Path, transitions: Sequence[Transition]) -> dict[str, str]:
    """`sha:path` to the content key of the version each transition wrote (removals have none).

    A mirrored file is the object's sanitized content, so its canonical JSON is what the watch and
    an admission fact both digest (`pipeline.content.key`).
    """
    keys = {}
    for t in transitions:
        if t.fingerprint is not None:
            obj = _load(_git(repo, "show", f"{t.sha}:{t.path}"))
            keys[f"{t.sha}:{t.path}"] = content_key(sanitized_json(obj))
    return keys
