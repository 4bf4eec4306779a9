"""The chart under test and the helm CLI built from the Go module proxy (`build-helm.sh`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

__all__ = ["BUILD_HELM", "CHART", "helm_path", "render", "run_helm"]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "charts" / "reverser-pipeline"
BUILD_HELM = Path(__file__).resolve().parent / "build-helm.sh"


def helm_path() -> Path | None:
    """The built helm binary, or None when `build-helm.sh` has not been run (nothing is built)."""
    out = subprocess.run(
        ["bash", str(BUILD_HELM), "--print-path"], check=True, capture_output=True, text=True
    )
    path = Path(out.stdout.strip().splitlines()[-1])
    return path if os.access(path, os.X_OK) else None


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True)


def render(helm: Path, namespace: str, *args: str) -> list[dict[str, Any]]:
    """`helm template` of the chart as parsed objects; raises with helm's own message on failure."""
    result = run_helm(helm, "template", "rp", str(CHART), "--namespace", namespace, *args)
    if result.returncode != 0:
        raise AssertionError(f"helm template failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
