"""`REVERSER_NO_SKIPS=1` (set by `.ci/run`) turns a skipped test into a failure that names the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import pytest

@pytest.fixture
def missing_tool() -> None:
    pytest.skip("probe tool is not built")

def test_skips_in_the_body() -> None:
    pytest.skip("probe reason")

def test_skips_in_a_fixture(missing_tool: None) -> None:
    pass

def test_passes() -> None:
    pass
"""


def run_probe(tmp_path: Path, no_skips: str | None) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "REVERSER_NO_SKIPS"}
    if no_skips is not None:
        env["REVERSER_NO_SKIPS"] = no_skips
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-rA", str(probe)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_skips_fail_with_their_reason_when_ci_forbids_them(tmp_path: Path) -> None:
    result = run_probe(tmp_path, "1")
    assert result.returncode == 1, result.stdout
    # A skip in the body fails the test; a skip in a fixture fails its setup (pytest says "error").
    assert "1 failed, 1 passed, 1 error" in result.stdout
    assert "CI forbids skips): Skipped: probe reason" in result.stdout
    assert "CI forbids skips): Skipped: probe tool is not built" in result.stdout


@pytest.mark.parametrize("value", [None, "0"])
def test_skips_stay_skips_locally(tmp_path: Path, value: str | None) -> None:
    result = run_probe(tmp_path, value)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 2 skipped" in result.stdout
