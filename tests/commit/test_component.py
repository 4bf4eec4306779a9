"""The commit worker inside `reverser run`: built only when configured, ready, and exporting metrics."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from pipeline.commit.component import build
from pipeline.commit.consumer import CommitWorker
from pipeline.config import LogSettings, MetricsSettings, ProviderSettings, Settings, TargetSettings
from pipeline.log import open_log
from pipeline.service.app import Service
from tests.commit.helpers import Work, bare_remote, cm, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.conftest import unique_prefix


def test_not_built_without_providers_or_targets(tmp_path: Path) -> None:
    log = open_log(Settings(workdir=tmp_path))
    assert build(Settings(workdir=tmp_path), log) is None
    only_provider = Settings(workdir=tmp_path, providers=[ProviderSettings(name="g", url="/x")])
    assert build(only_provider, log) is None


async def test_runs_inside_the_service(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    settings = Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0"),
        providers=[ProviderSettings(name="git", url=str(remote), commit_window_s=0.1, push_cooldown_s=0.1)],
        targets=[TargetSettings(name="t1", provider="git", path="live")],
    )
    service = Service(settings, factories=[build])
    await service.start()
    try:
        assert isinstance(service.components[0], CommitWorker)
        await append_work(service.log, settings, [Work(step_ms=10).create(cm("svc"))])
        await wait_settled(service.log, settings)
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{service.metrics_port}"
            async with http.get(f"{base}/readyz") as ready:
                assert ready.status == 200
            async with http.get(f"{base}/metrics") as response:
                text = await response.text()
        assert 'reverser_commit_pushes_total{branch="main",provider="git",result="ok"}' in text
    finally:
        await service.stop()
    assert log_lines(remote, fmt="%s") == ["[CREATE] v1/configmaps/svc"]
