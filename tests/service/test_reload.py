"""SIGHUP: the file's providers and targets reach the running stages through the apply path."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import Settings, load_settings
from pipeline.log.api import Log
from pipeline.service.app import CONFIG_CHANGES, Service
from tests.e2e.gitremote import GitRemote
from tests.e2e.service_process import ServiceProcess
from tests.support.net import free_port


def _config(tmp_path: Path, targets: list[str], remote: str = "/tmp/none.git") -> dict[str, Any]:
    return {
        "workdir": str(tmp_path / "work"),
        "log": {"backend": "embedded", "fsync": False},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"addr": f"127.0.0.1:{free_port()}", "allow_plain_http": True},
        "providers": [{"name": "p", "url": remote}],
        "targets": [{"name": name, "provider": "p", "path": name} for name in targets],
        "lag": {"enabled": False},
    }


class Taker:
    """A stage that records every configuration it is handed."""

    name = "taker"

    def __init__(self) -> None:
        self.applied: list[list[str]] = []

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def ready(self) -> bool:
        return True

    async def apply(self, settings: Settings) -> None:
        self.applied.append([t.name for t in settings.targets])


def _count(outcome: str) -> float:
    return float(CONFIG_CHANGES.labels("file", outcome)._value.get())


async def test_reload_applies_a_valid_file_and_keeps_running_on_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, ["a"])))
    taker = Taker()

    def build(_s: Settings, _l: Log) -> Taker:
        return taker

    service = Service(
        load_settings(path, environ={}), factories=[build], reload=lambda: load_settings(path, environ={})
    )
    await service.start()
    try:
        applied, invalid, refused = _count("applied"), _count("invalid"), _count("refused")
        path.write_text(yaml.safe_dump(_config(tmp_path, ["a", "b"])))
        await service.reload()
        assert taker.applied == [["a", "b"]]
        assert _count("applied") == applied + 1

        path.write_text("targets: [{name: x, provider: missing}]\n")
        await service.reload()
        assert taker.applied == [["a", "b"]]
        assert _count("invalid") == invalid + 1

        switched = _config(tmp_path, [])
        switched.update({"providers": [], "clusters": [{"name": "c"}], "custom_resources": {"enabled": True}})
        path.write_text(yaml.safe_dump(switched))
        await service.reload()
        assert taker.applied == [["a", "b"]]
        assert _count("refused") == refused + 1
        assert [t.name for t in service.settings.targets] == ["a", "b"]
    finally:
        await service.stop()


def test_sighup_reloads_the_file_of_a_running_service(tmp_path: Path) -> None:
    remote = GitRemote(tmp_path / "remote.git")
    service = ServiceProcess(tmp_path, _config(tmp_path, ["a"], remote.url))
    service.start()
    try:
        service.config_path.write_text(yaml.safe_dump(_config(tmp_path, ["a", "b"], remote.url)))
        assert service.pid is not None
        os.kill(service.pid, signal.SIGHUP)
        service.wait_for_metric("reverser_config_changes_total", 1, 60, source="file", outcome="applied")
        service.config_path.write_text("targets: [{name: x, provider: missing}]\n")
        os.kill(service.pid, signal.SIGHUP)
        service.wait_for_metric("reverser_config_changes_total", 1, 60, source="file", outcome="invalid")
        assert service.metric_sum("reverser_config_changes_total", outcome="applied") == 1
    finally:
        assert service.stop() == 0, service.log_tail()
