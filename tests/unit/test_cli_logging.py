"""Log output of `reverser` (issue 33, CLI conventions): `REVERSER_LOG_LEVEL` as the default of
`--log-level`, and `--log-format json` (or `REVERSER_LOG_FORMAT`) for one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import load_settings
from pipeline.logoutput import JsonFormatter

REVERSER = Path(sys.executable).with_name("reverser")
#: A one-word near miss of `workdir`: `load_settings` warns about it, a cheap record to look at.
TYPO = {"REVERSER_WORKDR": "x"}
WARNING_TEXT = "REVERSER_WORKDR names no setting"


def reverser(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), "lag", "--workdir", str(tmp_path / "none"), *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=60,
        check=False,
    )


def test_the_environment_sets_the_level_and_the_flag_wins(tmp_path: Path) -> None:
    quiet = reverser(env={**TYPO, "REVERSER_LOG_LEVEL": "ERROR"}, tmp_path=tmp_path)
    assert quiet.returncode == 2
    assert WARNING_TEXT not in quiet.stderr
    flag = reverser("--log-level", "WARNING", env={**TYPO, "REVERSER_LOG_LEVEL": "ERROR"}, tmp_path=tmp_path)
    assert WARNING_TEXT in flag.stderr


def test_a_bad_level_in_the_environment_is_a_usage_error(tmp_path: Path) -> None:
    done = reverser(env={"REVERSER_LOG_LEVEL": "LOUD"}, tmp_path=tmp_path)
    assert done.returncode == 2
    assert "REVERSER_LOG_LEVEL: invalid choice: 'LOUD'" in done.stderr


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--log-format", "json"), {}),
        ((), {"REVERSER_LOG_FORMAT": "json"}),
        (("--log-format", "json"), {"REVERSER_LOG_FORMAT": "text"}),
    ],
)
def test_json_logs_are_one_object_per_line(
    args: tuple[str, ...], env: dict[str, str], tmp_path: Path
) -> None:
    done = reverser(*args, env={**TYPO, **env}, tmp_path=tmp_path)
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert len(records) == 1
    assert set(records[0]) == {"time", "level", "logger", "message"}
    assert records[0]["level"] == "WARNING"
    assert records[0]["logger"] == "pipeline.config"
    assert WARNING_TEXT in records[0]["message"]


def test_json_lines_carry_the_traceback_and_no_credentials() -> None:
    try:
        raise RuntimeError("push to https://bot:hunter2@git.example/repo.git failed")
    except RuntimeError:
        url = "https://bot:hunter2@git.example/repo.git"
        record = logging.LogRecord(
            "pipeline.commit", logging.ERROR, __file__, 1, "cloning %s", (url,), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "hunter2" not in line
    fields = json.loads(line)
    assert fields["message"] == "cloning https://git.example/repo.git"
    assert "RuntimeError: push to https://git.example/repo.git failed" in fields["exc"]


def test_the_command_line_variables_are_not_unknown_settings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pipeline.config"):
        load_settings(environ={"REVERSER_LOG_LEVEL": "DEBUG", "REVERSER_LOG_FORMAT": "json"})
    assert caplog.records == []
