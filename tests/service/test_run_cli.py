"""`reverser run` refuses bad configuration with the field and the reason, and starts all or nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ConfigError, Settings
from pipeline.log.api import Log
from pipeline.service.app import Service


def reverser(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_invalid_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("attribution:\n  grace_ms: -5\nlog:\n  topic_prefix: 'has space'\n")
    result = reverser("run", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert "attribution.grace_ms" in result.stderr
    assert "log.topic_prefix" in result.stderr


def test_unsafe_listener_exits_2_with_the_reason(tmp_path: Path) -> None:
    result = reverser(
        "run",
        "--workdir",
        str(tmp_path / "w"),
        "--audit-addr",
        "0.0.0.0:0",
        "--metrics-addr",
        "127.0.0.1:0",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "refusing plain HTTP on a non-loopback address" in result.stderr
    assert "Traceback" not in result.stderr


class Recorder:
    def __init__(self, name: str, events: list[str], fail: bool = False) -> None:
        self.name = name
        self._events = events
        self._fail = fail

    async def start(self) -> None:
        if self._fail:
            raise ConfigError(f"{self.name}: cannot start")
        self._events.append(f"start {self.name}")

    async def stop(self) -> None:
        self._events.append(f"stop {self.name}")

    def ready(self) -> bool:
        return True


async def test_a_stage_that_fails_to_start_stops_the_ones_before_it(tmp_path: Path) -> None:
    events: list[str] = []
    settings = Settings(workdir=tmp_path)
    settings.metrics.addr = "127.0.0.1:0"

    def first(_s: Settings, _l: Log) -> Recorder:
        return Recorder("first", events)

    def broken(_s: Settings, _l: Log) -> Recorder:
        return Recorder("broken", events, fail=True)

    service = Service(settings, factories=[first, broken])
    with pytest.raises(ConfigError, match="broken: cannot start"):
        await service.start()
    assert events == ["start first", "stop first"]
    assert service.components == []
