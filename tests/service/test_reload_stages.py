"""A static file without targets builds no router, commit or watch stage, and a reload cannot start
one: `reverser run` says so at start, and a reload whose file now needs one names it as needing a
restart (logged and counted) while the running stages take the file. Embedded log, real service.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.commit import component as commit_component
from pipeline.config import (
    ClusterSettings,
    LogSettings,
    MetricsSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
)
from pipeline.router import component as router_component
from pipeline.service.app import Service
from tests.support.net import free_port


def _ignored_targets() -> float:
    return REGISTRY.get_sample_value("reverser_config_reload_ignored_total", {"setting": "targets"}) or 0.0


async def test_a_file_without_targets_says_targets_need_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", fsync=False),
        metrics=MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
        clusters=[ClusterSettings(name="prod")],
        providers=[ProviderSettings(name="git", url=str(tmp_path / "none.git"))],
    )
    with_target = empty.model_copy(
        update={"targets": [TargetSettings(name="t", provider="git", cluster="prod", path="t")]}
    )
    file = [empty]
    service = Service(
        empty, factories=[router_component.build, commit_component.build], reload=lambda: file[0]
    )
    with caplog.at_level(logging.WARNING, logger="pipeline.service.app"):
        await service.start()
    try:
        assert service.components == []
        assert (
            "the configuration file builds no router, commit-worker stage (no targets, or no target "
            "with rules on a configured cluster); a reload (SIGHUP) cannot start it: targets added "
            "to the file later take effect only after a restart"
        ) in caplog.text
        before = _ignored_targets()
        caplog.clear()
        file[0] = with_target
        with caplog.at_level(logging.WARNING, logger="pipeline.service.app"):
            await service.reload()
        assert (
            "reload: the file's targets need the router, commit-worker stage, which was not built at "
            "start (the file had no targets for it): restart reverser run to write them"
        ) in caplog.text
        assert _ignored_targets() == before + 1
        assert service.components == []
        # the file is still taken (the settings the process reports are the file's)
        assert [t.name for t in service.settings.targets] == ["t"]
    finally:
        await service.stop()

    # started with the target: the stages run, and a reload of the same file names nothing
    caplog.clear()
    started = with_target.model_copy(update={"metrics": MetricsSettings(addr=f"127.0.0.1:{free_port()}")})
    service = Service(
        started, factories=[router_component.build, commit_component.build], reload=lambda: started
    )
    with caplog.at_level(logging.WARNING, logger="pipeline.service.app"):
        await service.start()
        try:
            assert sorted(c.name for c in service.components) == ["commit-worker", "router"]
            before = _ignored_targets()
            await service.reload()
            assert _ignored_targets() == before
        finally:
            await service.stop()
    assert "builds no" not in caplog.text
    assert "restart reverser run" not in caplog.text
