"""`deploy/redpanda/run-local.sh`: start, wait for health, create topics, stop, and its refusals.

Redpanda's `rpk`/`redpanda` binaries cannot be installed on the project's machines (they come only
from Redpanda's own package repositories), so `rpk` and `reverser` are replaced here by small
scripts that record how they were called; everything else is the real script.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "redpanda" / "run-local.sh"

# Healthy only once `redpanda start` has run, as the real cluster would be.
FAKE_RPK = """#!/bin/sh
echo "rpk $*" >> "$CALLS"
case "$1 $2" in
  "redpanda start") exec sleep 300 ;;
  "cluster health") grep -q "^rpk redpanda start" "$CALLS"; exit $? ;;
esac
exit 0
"""

FAKE_REVERSER = """#!/bin/sh
echo "reverser $* bootstrap=$REVERSER_LOG__BOOTSTRAP_SERVERS" >> "$CALLS"
"""


def _tools(tmp_path: Path, with_rpk: bool = True) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {"reverser": FAKE_REVERSER, **({"rpk": FAKE_RPK} if with_rpk else {})}
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "REDPANDA_HOME": str(tmp_path / "state"),
        "CALLS": str(tmp_path / "calls"),
        **extra,
    }
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_start_waits_for_health_creates_topics_and_stop_ends_redpanda(tmp_path: Path) -> None:
    bin_dir = _tools(tmp_path)

    started = _run(tmp_path, bin_dir, "start")
    assert started.returncode == 0, started.stderr
    pid = int((tmp_path / "state" / "redpanda.pid").read_text())
    try:
        calls = (tmp_path / "calls").read_text().splitlines()
        assert any(c.startswith("rpk redpanda start --config ") for c in calls)
        assert any(c.startswith("rpk cluster health") for c in calls)
        assert calls[-1] == "reverser topics create bootstrap=127.0.0.1:19092"
        config = yaml.safe_load((tmp_path / "state" / "redpanda.yaml").read_text())
        assert config["redpanda"]["data_directory"] == f"{tmp_path}/state/data"
        assert config["redpanda"]["kafka_api"][0] == {"name": "local", "address": "127.0.0.1", "port": 19092}
        assert _run(tmp_path, bin_dir, "status").returncode == 0
    finally:
        stopped = _run(tmp_path, bin_dir, "stop")
    assert stopped.returncode == 0, stopped.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _run(tmp_path, bin_dir, "status").stdout.strip() == "stopped"


def test_start_without_rpk_says_what_is_missing(tmp_path: Path) -> None:
    result = _run(tmp_path, _tools(tmp_path, with_rpk=False), "start")
    assert result.returncode == 1
    assert "rpk is not on PATH" in result.stderr


def test_redpanda_that_dies_during_start_is_reported_with_its_log(tmp_path: Path) -> None:
    bin_dir = _tools(tmp_path)
    (bin_dir / "rpk").write_text(
        '#!/bin/sh\ncase "$1 $2" in\n  "redpanda start") echo "fatal: cannot lock data dir"; exit 1 ;;\n'
        '  "cluster health") exit 1 ;;\nesac\n'
    )
    result = _run(tmp_path, bin_dir, "start")
    assert result.returncode == 1
    assert "redpanda exited" in result.stderr
    assert "cannot lock data dir" in result.stderr


def test_unknown_command_prints_usage(tmp_path: Path) -> None:
    result = _run(tmp_path, _tools(tmp_path), "restart")
    assert result.returncode == 2
    assert "usage:" in result.stderr
