"""`-b/--bootstrap-server` against a real Kafka broker (issue 33, CLI conventions).

The flag points `topics`, `lag` and `dead-letter` at a cluster without a configuration file's
`log.bootstrap_servers`, and wins over `log.backend: embedded`. Each command runs as the installed
`reverser` script in its own process, as a person would type it. The configuration file here holds
only this test's topic prefix (the shared broker has every other test's topics too) and says
`backend: embedded`, so a command that ignored the flag would refuse the empty workdir instead.
When the brokers named by the flag are down, the hint names the flag, not the setting.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.codec.dead_letter import letter_record
from pipeline.config import LogSettings, Settings
from pipeline.exitcodes import ExitCode
from pipeline.log import open_log
from pipeline.log.api import Record, TopicPartition
from pipeline.log.topics import TopicNames
from tests.conftest import unique_prefix
from tests.support.net import free_port

pytestmark = pytest.mark.kafka

REVERSER = Path(sys.executable).with_name("reverser")
COMMAND_TIMEOUT_S = 120.0


def reverser(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *args, "--log-level", "ERROR"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def config_file(tmp_path: Path, prefix: str, **log: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "workdir": str(tmp_path / "no-log-here"),
                "log": {"backend": "embedded", "topic_prefix": prefix, **log},
            }
        ),
        encoding="utf-8",
    )
    return path


async def fill(bootstrap: str, prefix: str) -> None:
    """Three records on branch-work partition 4, a group 1 behind on them, one dead letter."""
    settings = Settings(log=LogSettings(backend="kafka", bootstrap_servers=bootstrap, topic_prefix=prefix))
    names = TopicNames.for_prefix(prefix)
    async with open_log(settings) as log:
        for value in (b"a", b"b", b"c"):
            await log.append(names.branch_work, value, partition=4)
        await log.commit_group_offsets(f"{prefix}.commit-worker", {TopicPartition(names.branch_work, 4): 2})
        parked = Record(names.branch_work, 4, 1, 0, b"git/main", b"b", ())
        letter = letter_record(parked, "commit-worker", ValueError("cannot apply"), 1)
        await log.append(names.dead_letter, letter.value, key=letter.key, headers=letter.headers)


def test_topics_lag_and_dead_letter_read_the_broker_named_by_the_flag(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    names = TopicNames.for_prefix(prefix)
    config = str(config_file(tmp_path, prefix))
    without = reverser("topics", "list", "--config", config, cwd=tmp_path)
    assert without.returncode == ExitCode.USAGE, "the file alone selects the (missing) embedded log"
    assert "no embedded log there" in without.stderr

    created = reverser("topics", "create", "--config", config, "-b", kafka_bootstrap, cwd=tmp_path)
    assert created.returncode == ExitCode.OK, created.stderr
    asyncio.run(fill(kafka_bootstrap, prefix))

    listed = reverser(
        "topics",
        "list",
        "--config",
        config,
        "--bootstrap-server",
        kafka_bootstrap,
        "-o",
        "json",
        cwd=tmp_path,
    )
    assert listed.returncode == ExitCode.OK, listed.stderr
    document = json.loads(listed.stdout)
    assert document["backend"] == "kafka"
    topics = {t["topic"]: t for t in document["topics"]}
    assert topics[names.branch_work]["exists"]
    assert topics[names.branch_work]["partitions"] == 12
    assert sum(topics[names.branch_work]["end_offsets"].values()) == 3

    described = reverser(
        "topics",
        "describe",
        "branch-work",
        "--config",
        config,
        "-b",
        kafka_bootstrap,
        "-o",
        "json",
        cwd=tmp_path,
    )
    assert described.returncode == ExitCode.OK, described.stderr
    [topic] = json.loads(described.stdout)["topics"]
    assert topic["end_offsets"]["4"] == 3
    assert topic["configs"]["cleanup.policy"] == "delete"

    checked = reverser("topics", "check", "--config", config, "-b", kafka_bootstrap, cwd=tmp_path)
    assert checked.returncode == ExitCode.OK, checked.stdout + checked.stderr

    lag = reverser(
        "lag",
        "--config",
        config,
        "-b",
        kafka_bootstrap,
        "--group",
        f"^{prefix}\\.",
        "-o",
        "json",
        cwd=tmp_path,
    )
    assert lag.returncode == ExitCode.OK, lag.stderr
    [group] = json.loads(lag.stdout)["groups"]
    assert group["group"] == f"{prefix}.commit-worker"
    [partition] = [p for p in group["partitions"] if p["partition"] == 4]
    assert (partition["committed"], partition["log_end"], partition["lag"]) == (2, 3, 1)

    letters = reverser(
        "dead-letter", "list", "--config", config, "-b", kafka_bootstrap, "-o", "json", cwd=tmp_path
    )
    assert letters.returncode == ExitCode.OK, letters.stderr
    [letter] = json.loads(letters.stdout)["letters"]
    assert letter["source"] == f"{names.branch_work}[4]@1"
    assert (letter["stage"], letter["message"]) == ("commit-worker", "cannot apply")
    assert not (tmp_path / "no-log-here").exists(), "the embedded log was never opened"


@pytest.mark.parametrize(
    "command",
    [("topics", "list"), ("topics", "describe"), ("topics", "check"), ("lag",), ("dead-letter", "list")],
    ids=" ".join,
)
def test_an_unreachable_flag_is_named_in_the_hint(command: tuple[str, ...], tmp_path: Path) -> None:
    """The setting's hint (`check log.bootstrap_servers`) sent people to a file they never wrote."""
    config = str(config_file(tmp_path, unique_prefix(), connect_retries=0, request_timeout_ms=2000))
    dead = f"127.0.0.1:{free_port()}"
    done = reverser(*command, "--config", config, "-b", dead, cwd=tmp_path)
    assert done.returncode == ExitCode.UNAVAILABLE, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"reverser {' '.join(command)}: log unavailable: "), line
    assert dead in line
    assert line.endswith("check -b/--bootstrap-server and that the brokers are up"), line
    assert "log.bootstrap_servers" not in line
