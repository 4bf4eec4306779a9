"""`reverser replay watch-events`: one target's watch history becomes branch-work for a new target."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.commit.consumer import CommitWorker
from pipeline.config import Settings
from pipeline.demo.recording import WatchStep
from pipeline.log import Log
from pipeline.log.topics import TopicNames
from pipeline.models import branch_key
from tests.commit.helpers import bare_remote, files, log_lines
from tests.commit.logwork import wait_settled
from tests.router.test_router import append_live, configmap, prepare, read_work


def _settings(settings: Settings, remote: Path) -> Settings:
    return Settings.model_validate(
        {
            **settings.model_dump(mode="json"),
            "providers": [
                {"name": "repo", "url": str(remote), "commit_window_s": 0.1, "push_cooldown_s": 0.1}
            ],
            "targets": [
                {"name": "shop", "provider": "repo", "branch": "main", "path": "clusters/default"},
                {"name": "shop-copy", "provider": "repo", "branch": "copy", "path": "copy"},
            ],
        }
    )


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_watch_history_of_one_target_becomes_work_and_commits_for_another(
    any_log: Log, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = _settings(settings, remote)
    topics = await prepare(any_log, cfg)
    await append_live(
        any_log,
        topics,
        [
            WatchStep("ADDED", configmap("a", "1")),
            WatchStep("ADDED", configmap("b", "2")),
            WatchStep("MODIFIED", configmap("a", "3")),
            WatchStep("DELETED", configmap("b", "4")),
        ],
    )
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("elsewhere", "5"))], target="other")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    # the embedded log admits one process: the command opens it itself
    await any_log.close()
    argv = ["replay", "watch-events", "--config", str(config)]
    argv += ["--from-target", "shop", "--target", "shop-copy"]
    assert await asyncio.to_thread(main, argv) == 0
    assert "appended 4 branch-work record(s) for shop-copy (repo copy)" in capsys.readouterr().out
    assert await asyncio.to_thread(main, [*argv[:-1], "nope"]) == 2
    assert "'nope' is not a configured target" in capsys.readouterr().err

    await any_log.start()
    names = TopicNames.for_prefix(cfg.log.topic_prefix)
    items = await read_work(any_log, names.branch_work, 4, key=branch_key("repo", "copy"))
    writes = [item["body"][1] for item in items]
    assert [(w["name"], w["operation"]) for w in writes] == [
        ("a", "CREATE"), ("b", "CREATE"), ("a", "UPDATE"), ("b", "DELETE"),
    ]
    assert {(i["target"], i["path"], i["branch"]) for i in items} == {("shop-copy", "copy", "copy")}
    assert {w["author"]["outcome"] for w in writes} == {"NOT_ATTEMPTED"}

    worker = CommitWorker(cfg, any_log)
    await worker.start()
    try:
        await wait_settled(any_log, cfg)
    finally:
        await worker.stop()
    assert sorted(files(remote, "copy")) == ["copy/shop/configmaps/a.yaml"]
    assert log_lines(remote, "copy", fmt="%an")
