"""`reverser topics list|describe` (issue 33, CLI conventions): what the log holds for each of the
pipeline's topics, read-only, through the `Log` seam (here the embedded log).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.log import open_log

REVERSER = Path(sys.executable).with_name("reverser")


def reverser(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A workdir whose embedded log has the pipeline's topics and three records on branch-work."""
    assert reverser("topics", "create", "--workdir", str(tmp_path)).returncode == 0

    async def write() -> None:
        async with open_log(Settings(workdir=tmp_path)) as log:
            for _ in range(3):
                await log.append("reverser.branch-work", b"x", partition=2)

    asyncio.run(write())
    return tmp_path


def test_list_shows_each_topic_with_its_settings_and_offsets(workdir: Path) -> None:
    done = reverser("topics", "list", "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert lines["reverser.branch-work"] == ["reverser.branch-work", "12", "1", "delete", "1209600000", "3"]
    assert lines["reverser.object-state"][3:5] == ["compact", "-"]


def test_describe_names_one_topic_with_or_without_the_prefix(workdir: Path) -> None:
    short = reverser("topics", "describe", "branch-work", "--workdir", str(workdir), "--output", "json")
    full = reverser(
        "topics", "describe", "reverser.branch-work", "--workdir", str(workdir), "--output", "json"
    )
    assert short.returncode == full.returncode == 0, short.stderr
    assert short.stdout == full.stdout
    [topic] = json.loads(short.stdout)["topics"]
    assert topic["configs"]["retention.ms"] == "1209600000"
    assert topic["end_offsets"]["2"] == 3
    assert topic["end_offsets"]["0"] == 0


def test_describe_refuses_a_topic_that_is_not_the_pipelines(workdir: Path) -> None:
    done = reverser("topics", "describe", "nope", "--workdir", str(workdir))
    assert done.returncode == 2
    assert "nope: not one of the pipeline's topics" in done.stderr


@pytest.mark.parametrize("action", ["list", "describe"])
def test_a_workdir_without_a_log_is_refused_and_left_alone(action: str, tmp_path: Path) -> None:
    done = reverser("topics", action, "--workdir", str(tmp_path / "typo"))
    assert done.returncode == 2
    assert "no embedded log there" in done.stderr
    assert not (tmp_path / "typo").exists()
