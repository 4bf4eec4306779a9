"""`-o/--output table|json|yaml` on the read commands (issue 33, CLI conventions): one flag, one
serialisation (`pipeline.tables`), the same document in JSON and YAML.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REVERSER = Path(sys.executable).with_name("reverser")
#: Read commands on the embedded log, as typed after `reverser` (each gets `--workdir`).
COMMANDS = (
    ("lag",), ("topics", "list"), ("topics", "describe"), ("topics", "check"), ("dead-letter", "list")
)


def reverser(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run([str(REVERSER), *args], capture_output=True, text=True, env=env, timeout=60,
                          check=False)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workdir")
    assert reverser("topics", "create", "--workdir", str(path)).returncode == 0
    return path


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_yaml_holds_the_json_document(command: tuple[str, ...], workdir: Path) -> None:
    as_json = reverser(*command, "--workdir", str(workdir), "-o", "json")
    as_yaml = reverser(*command, "--workdir", str(workdir), "--output", "yaml")
    assert as_json.returncode == as_yaml.returncode, as_yaml.stderr
    from_yaml, from_json = yaml.safe_load(as_yaml.stdout), json.loads(as_json.stdout)
    # `lag` says when it looked, which differs between the two runs.
    from_yaml.pop("taken_at", None)
    from_json.pop("taken_at", None)
    assert from_yaml == from_json


def test_doctor_takes_the_same_flag(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("nonsense: 1\n", encoding="utf-8")
    done = reverser("doctor", "--config", str(config), "-o", "yaml")
    assert done.returncode == 1, done.stderr
    assert yaml.safe_load(done.stdout)["ok"] is False


def test_an_unknown_format_suggests_the_nearest(workdir: Path) -> None:
    done = reverser("lag", "--workdir", str(workdir), "-o", "yml")
    assert done.returncode == 2
    assert "(did you mean yaml?)" in done.stderr
