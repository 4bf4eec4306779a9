"""A target removed from the static file by a reload (SIGHUP) is retired like a deleted GitTarget.

A running service with the real commit worker, on both log backends, pushing to a real bare Git
remote: the reload appends the removed targets' `TargetDeleted` work, so under prune `Always` the
folder goes in one committer commit, under `Never` the files stay, and late records of a removed
target are skipped.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.commit import component as commit_component
from pipeline.config import MetricsSettings, ProviderSettings, Settings, TargetSettings
from pipeline.service.app import Service
from tests.commit.helpers import Work, bare_remote, cm, files, git, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.support.net import free_port


def _skipped(reason: str) -> float:
    return REGISTRY.get_sample_value("reverser_commit_skipped_total", {"reason": reason}) or 0.0


async def test_a_target_removed_by_reload_is_retired_per_its_prune_mode(
    settings: Settings, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    gone = TargetSettings(name="gone", provider="git", path="gone", prune="Always")
    kept = TargetSettings(name="kept", provider="git", path="kept", prune="Never")
    stays = TargetSettings(name="stays", provider="git", path="stays", prune="Always")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0.2, push_cooldown_s=0.2)
    before = settings.model_copy(
        update={
            "providers": [provider],
            "targets": [gone, kept, stays],
            "metrics": MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
        }
    )
    after = before.model_copy(update={"targets": [stays]})
    file = [before]
    service = Service(before, factories=[commit_component.build], reload=lambda: file[0])
    await service.start()
    w = Work(step_ms=10)
    try:
        await append_work(
            service.log,
            before,
            [
                w.create(cm("a"), target="gone", path="gone"),
                w.create(cm("c"), target="kept", path="kept"),
                w.create(cm("d"), target="stays", path="stays"),
            ],
        )
        await wait_settled(service.log, before)
        assert len(files(remote)) == 3
        commits = len(log_lines(remote))
        file[0] = after
        await service.reload()
        await wait_settled(service.log, before)
        assert sorted(files(remote)) == ["kept/team-a/configmaps/c.yaml", "stays/team-a/configmaps/d.yaml"]
        lines = log_lines(remote, fmt="%cn|%s")
        assert lines[commits:] == [
            f"{provider.committer.name}|removed gone/ of deleted target gone (prune Always)"
        ]
        message = git(remote, "log", "-1", "--format=%B", "main")
        assert "target gone was removed from the configuration file (reload)" in message

        # a record its stream still routed: skipped; the record after it is the sign it was passed
        late_before = _skipped("deleted_target")
        await append_work(
            service.log,
            after,
            [
                w.create(cm("late"), target="gone", path="gone"),
                w.create(cm("e"), target="stays", path="stays"),
            ],
        )
        await wait_settled(service.log, before)
        assert sorted(files(remote)) == [
            "kept/team-a/configmaps/c.yaml",
            "stays/team-a/configmaps/d.yaml",
            "stays/team-a/configmaps/e.yaml",
        ]
        assert _skipped("deleted_target") == late_before + 1
    finally:
        await service.stop()
