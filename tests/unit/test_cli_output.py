"""`-o/--output table|json|yaml` on the read commands (issue 33, CLI conventions): one flag, one
serialisation (`pipeline.tables`), the same document in JSON and YAML.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.cli import build_parser
from pipeline.codec.dead_letter import letter_record
from pipeline.config import Settings
from pipeline.log import open_log
from pipeline.log.api import Record
from pipeline.log.topics import TopicNames

REVERSER = Path(sys.executable).with_name("reverser")
#: Read commands on the embedded log, as typed after `reverser` (each gets `--workdir`).
COMMANDS = (
    ("lag",),
    ("topics", "list"),
    ("topics", "describe"),
    ("topics", "check"),
    ("dead-letter", "list"),
    ("dead-letter", "show", "0"),
    ("replay", "facts"),
)


def reverser(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workdir")
    assert reverser("topics", "create", "--workdir", str(path)).returncode == 0
    asyncio.run(park_a_letter(Settings(workdir=path)))
    return path


async def park_a_letter(settings: Settings) -> None:
    """Dead letter 0: a branch-work record the commit worker could not apply."""
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    parked = Record(names.branch_work, 3, 7, 0, b"git/main", b"value", ())
    letter = letter_record(parked, "commit-worker", ValueError("cannot apply"), 1)
    async with open_log(settings) as log:
        await log.append(names.dead_letter, letter.value, key=letter.key, headers=letter.headers)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_yaml_holds_the_json_document(command: tuple[str, ...], workdir: Path) -> None:
    as_json = reverser(*command, "--workdir", str(workdir), "-o", "json")
    as_yaml = reverser(*command, "--workdir", str(workdir), "--output", "yaml")
    assert as_json.returncode == as_yaml.returncode, as_yaml.stderr
    from_yaml, from_json = yaml.safe_load(as_yaml.stdout), json.loads(as_json.stdout)
    # `lag` says when it looked and `replay facts` how long it took, which differ between runs.
    for moment in ("taken_at", "seconds"):
        from_yaml.pop(moment, None)
        from_json.pop(moment, None)
    assert from_yaml == from_json


def test_dead_letter_show_reads_as_labelled_lines_by_default(workdir: Path) -> None:
    done = reverser("dead-letter", "show", "0", "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "dead letter 0"
    assert "  source:      reverser.branch-work[3]@7" in done.stdout.splitlines()
    as_json = json.loads(reverser("dead-letter", "show", "0", "--workdir", str(workdir), "-o", "json").stdout)
    assert (as_json["source"], as_json["message"]) == ("reverser.branch-work[3]@7", "cannot apply")


def output_flags(parser: argparse.ArgumentParser, path: str = "reverser") -> dict[str, tuple[str, ...]]:
    """Each command path whose parser has `--output`: its option strings, then the choices it takes."""
    found: dict[str, tuple[str, ...]] = {}
    for action in parser._actions:
        if "--output" in action.option_strings:
            found[path] = (*action.option_strings, *(str(choice) for choice in action.choices or ()))
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(output_flags(sub, f"{path} {name}"))
    return found


def test_every_output_flag_is_the_one_convention() -> None:
    """Issue 33: `dead-letter show` (text|json) and `replay facts` (table|json) had flags of their own."""
    flags = output_flags(build_parser())
    assert {"reverser dead-letter show", "reverser replay facts", "reverser lag"} <= set(flags)
    convention = ("-o", "--output", "table", "json", "yaml")
    assert {path: flag for path, flag in flags.items() if flag != convention} == {}
