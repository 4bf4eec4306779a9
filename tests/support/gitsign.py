"""Keys and `git verify-commit` for the signed-commit tests (keys are generated per test)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.config import CommitterSettings
from tests.commit.helpers import git

__all__ = ["COMMITTER", "keygen", "verify_all"]

COMMITTER = CommitterSettings(name="Reverser Bot", email="bot@reverser.example")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def verify_all(remote: Path, env: dict[str, str] | None = None, *config: str) -> list[str]:
    """`git verify-commit` on every commit of main (raises if one fails); returns %G?|%GS|%cn <%ce>."""
    shas = git(remote, "rev-list", "main").split()
    assert shas
    for sha in shas:
        subprocess.run(
            ["git", *config, "-C", str(remote), "verify-commit", sha],
            check=True,
            capture_output=True,
            env=env,
        )
    out = subprocess.run(
        ["git", *config, "-C", str(remote), "log", "--format=%G?|%GS|%cn <%ce>", "main"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return out.splitlines()
