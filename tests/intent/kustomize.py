"""The real kustomize for the tests, built from the Go module proxy by scripts/build-kustomize.sh."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

__all__ = ["BUILD_KUSTOMIZE", "build", "kustomize_path", "write_tree"]

BUILD_KUSTOMIZE = Path(__file__).resolve().parents[2] / "scripts" / "build-kustomize.sh"


def kustomize_path() -> Path:
    """The built kustomize; skips (a failure under CI, see tests/conftest.py) when it is not built."""
    out = subprocess.run(
        ["bash", str(BUILD_KUSTOMIZE), "--print-path"], check=True, capture_output=True, text=True
    )
    path = Path(out.stdout.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        pytest.skip(f"kustomize is not built; run {BUILD_KUSTOMIZE} (Go module proxy)")
    return path


def write_tree(root: Path, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def build(kustomize: Path, folder: Path) -> str:
    """`kustomize build` of `folder`, no plugins, no exec, no Helm (kustomize's defaults)."""
    result = subprocess.run(
        [str(kustomize), "build", str(folder)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )
    if result.returncode != 0:
        raise AssertionError(f"kustomize build {folder} failed: {result.stderr}")
    return result.stdout
