"""`reverser replay branch`: rebuild a branch from branch-work into an empty remote, with progress."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.commit.consumer import CommitWorker
from pipeline.config import LogSettings, ProviderSettings, Settings, TargetSettings
from pipeline.log import open_log
from tests.commit.helpers import ALICE, BOB, NOBODY, Work, bare_remote, cm, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.conftest import unique_prefix


def _settings(tmp_path: Path, remote: Path) -> Settings:
    return Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        providers=[ProviderSettings(name="git", url=str(remote), commit_window_s=0.3, push_cooldown_s=0.1)],
        targets=[TargetSettings(name="t1", provider="git", path="live", prune="Always")],
    )


async def _live_run(cfg: Settings) -> None:
    w = Work(step_ms=200)
    other = Work(branch="other", start=0)
    items = [w.create(cm(f"c{i}"), (ALICE, BOB, NOBODY)[i % 3]) for i in range(9)]
    items += [other.create(cm("elsewhere"))]
    items += w.snapshot(3, [cm("c0"), cm("c1")], rv="55")
    items += [w.delete("c0", BOB), w.update(cm("c1", key="v9"), ALICE)]
    log = open_log(cfg)
    await log.start()
    try:
        await append_work(log, cfg, items)
        worker = CommitWorker(cfg, log)
        await worker.start()
        await wait_settled(log, cfg)
        await worker.stop()
    finally:
        await log.close()


def test_replay_branch_into_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    live = bare_remote(tmp_path / "live.git")
    cfg = _settings(tmp_path, live)
    asyncio.run(_live_run(cfg))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    into = tmp_path / "rebuilt.git"
    argv = [
        "replay", "branch", "--config", str(config),
        "--provider", "git", "--branch", "main", "--into", str(into),
    ]
    code = main(argv)
    assert code == 0
    out = capsys.readouterr().out
    assert "replayed" in out
    assert "commit(s) on main" in out
    fmt = "%T|%an <%ae>|%s"
    assert log_lines(into, fmt=fmt) == log_lines(live, fmt=fmt)

    again = main(argv)
    assert again == 1
    assert "needs an empty remote" in capsys.readouterr().err


def test_replay_unknown_provider_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _settings(tmp_path, bare_remote(tmp_path / "r.git"))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    assert main(["replay", "branch", "--config", str(config), "--provider", "nope", "--branch", "main"]) == 1
    assert "unknown provider 'nope'" in capsys.readouterr().err
