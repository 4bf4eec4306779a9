"""Which build this is: the package version and the Git commit it was built from.

A wheel records the commit at build time (`setup.py` writes `BUILD_COMMIT_FILE` into the package);
a checkout (an editable install, `make install`) asks `git rev-parse` when asked, so the answer
follows the working tree rather than the last install. Neither source is required: without both,
the version stands alone.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__all__ = ["BUILD_COMMIT_FILE", "DISTRIBUTION", "build_commit", "describe_version", "register", "version"]

DISTRIBUTION = "reverser-pipeline"
#: Written next to this module by the wheel build: the commit's full hex SHA.
BUILD_COMMIT_FILE = "BUILD_COMMIT"
_GIT_TIMEOUT_S = 2.0
_PACKAGE_DIR = Path(__file__).resolve().parent


def version() -> str:
    """The installed distribution's version, or `unknown` when run from a tree that is not installed."""
    from importlib import metadata  # 50 ms that `reverser --help` need not pay

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_commit() -> str | None:
    """The Git commit of this build: recorded in the package, else the checkout's HEAD, else None."""
    recorded = _PACKAGE_DIR / BUILD_COMMIT_FILE
    if recorded.is_file():
        return recorded.read_text(encoding="ascii").strip() or None
    checkout = _PACKAGE_DIR.parent
    if not (checkout / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def describe_version() -> str:
    """`reverser 0.1.0 (git 1a2b3c4d5e6f)`, or `reverser 0.1.0` when the commit is not known."""
    commit = build_commit()
    suffix = f" (git {commit[:12]})" if commit else ""
    return f"reverser {version()}{suffix}"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("version")
    parser.set_defaults(func=_print_version)


def _print_version(_args: object) -> int:
    print(describe_version())
    return 0
