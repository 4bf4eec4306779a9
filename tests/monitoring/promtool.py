"""The alert rules under test and promtool built from the Go module proxy (`build-promtool.sh`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["BUILD_PROMTOOL", "DASHBOARD", "RULES", "RULE_TESTS", "promtool_path"]

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "deploy" / "charts" / "reverser-pipeline" / "files"
RULES = FILES / "prometheus-rules.yaml"
DASHBOARD = FILES / "grafana-dashboard.json"
RULE_TESTS = Path(__file__).resolve().parent / "prometheus-rules.test.yaml"
BUILD_PROMTOOL = Path(__file__).resolve().parent / "build-promtool.sh"


def promtool_path() -> Path | None:
    """The built promtool, or None when `build-promtool.sh` has not been run (nothing is built)."""
    out = subprocess.run(
        ["bash", str(BUILD_PROMTOOL), "--print-path"], check=True, capture_output=True, text=True
    )
    path = Path(out.stdout.strip().splitlines()[-1])
    return path if os.access(path, os.X_OK) else None
