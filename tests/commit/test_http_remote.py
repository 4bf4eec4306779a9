"""The commit worker against a real smart-HTTP remote with basic auth (git http-backend on loopback)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.commit.consumer import CommitWorker
from pipeline.commit.git.repo import GitRemoteError, LocalRepo, RemoteAuth
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log import open_log
from tests.commit.helpers import ALICE, BOB, Work, cm, files, log_lines
from tests.commit.httpgit import GitHttpServer, serving
from tests.commit.logwork import append_work, committed_offset, wait_settled
from tests.support.wait import wait_for

PASSWORD = "s3cret-Pa55word"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with serving(tmp_path / "srv", ["repo.git"], "git-user", PASSWORD) as srv:
        yield srv


def http_settings(settings: Settings, url: str) -> Settings:
    return settings.model_copy(
        update={
            "providers": [
                ProviderSettings(
                    name="git",
                    url=url,
                    username_env="TEST_GIT_USER",
                    password_env="TEST_GIT_PASSWORD",
                    allow_plain_http_credentials=True,
                    commit_window_s=0.2,
                    push_cooldown_s=0.2,
                )
            ],
            "targets": [TargetSettings(name="t1", provider="git", path="live")],
        }
    )


async def test_wrong_password_is_a_clear_auth_error(server: GitHttpServer, tmp_path: Path) -> None:
    repo = LocalRepo(tmp_path / "clone", f"{server.base_url}/repo.git", RemoteAuth("git-user", "wrong"))
    with pytest.raises(GitRemoteError) as caught:
        await repo.fetch()
    assert caught.value.auth
    assert "credentials rejected" in str(caught.value)
    assert "wrong" not in str(caught.value)


async def test_bad_credentials_lose_nothing_and_work_lands_after_fixing_them(
    settings: Settings,
    server: GitHttpServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = http_settings(settings, f"{server.base_url}/repo.git")
    w = Work(step_ms=10)
    log = open_log(cfg)
    await log.start()
    try:
        placed = await append_work(log, cfg, [w.create(cm("a")), w.create(cm("b"), BOB), w.delete("a", BOB)])
        assert len({partition for partition, _ in placed}) == 1, "one branch: one partition"
        partition = placed[0][0]
        monkeypatch.setenv("TEST_GIT_USER", "git-user")
        monkeypatch.setenv("TEST_GIT_PASSWORD", "not-the-password")
        worker = CommitWorker(cfg, log)
        with caplog.at_level(logging.ERROR, logger="pipeline.commit"):
            await worker.start()
            # The positive signal: the worker got as far as pushing and was refused.
            await wait_for(
                lambda: any("credentials rejected" in r.getMessage() for r in caplog.records),
                "the push to be refused",
                timeout_s=120,
            )
            await worker.stop()
        assert caplog.records
        assert all("not-the-password" not in r.getMessage() for r in caplog.records)
        assert await committed_offset(log, cfg, partition) == 0, "nothing settled before the push lands"

        monkeypatch.setenv("TEST_GIT_PASSWORD", PASSWORD)
        fixed = CommitWorker(cfg, log)
        await fixed.start()
        try:
            await wait_settled(log, cfg)
        finally:
            await fixed.stop()
    finally:
        await log.close()
    remote = server.root / "repo.git"
    assert log_lines(remote, fmt="%an|%s") == [
        "Alice Example|[CREATE] v1/configmaps/a",
        "Bob|bob on t1: 2 resource(s)",
    ]
    assert sorted(files(remote)) == ["live/team-a/configmaps/b.yaml"]
    clone_texts = [p.read_bytes() for p in (cfg.workdir / "git").rglob("*") if p.is_file()]
    assert clone_texts, "the worker kept no clone to check"
    assert all(PASSWORD.encode() not in text for text in clone_texts), "credentials must never be written"


async def test_push_over_http_with_foreign_commit_rebases(
    settings: Settings, server: GitHttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_GIT_USER", "git-user")
    monkeypatch.setenv("TEST_GIT_PASSWORD", PASSWORD)
    cfg = http_settings(settings, f"{server.base_url}/repo.git")
    from tests.commit.helpers import foreign_push

    remote = server.root / "repo.git"
    foreign_push(remote, tmp_path, "README.md", "first\n")
    log = open_log(cfg)
    await log.start()
    try:
        w = Work(step_ms=10)
        await append_work(log, cfg, [w.create(cm("a"), ALICE)])
        worker = CommitWorker(cfg, log)
        await worker.start()
        await wait_settled(log, cfg)
        foreign_push(remote, tmp_path, "NOTES.md", "second\n")
        await append_work(log, cfg, [w.create(cm("b"), ALICE)])
        await wait_settled(log, cfg)
        await worker.stop()
    finally:
        await log.close()
    assert [s for s in log_lines(remote, fmt="%s")] == [
        "human edit README.md",
        "[CREATE] v1/configmaps/a",
        "human edit NOTES.md",
        "[CREATE] v1/configmaps/b",
    ]
    assert any(status == 200 and "receive-pack" in path for path, status in server.requests)


async def test_unset_credentials_variable_loses_nothing(
    settings: Settings,
    server: GitHttpServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("TEST_GIT_PASSWORD", raising=False)
    cfg = http_settings(settings, f"{server.base_url}/repo.git")
    log = open_log(cfg)
    await log.start()
    try:
        [(partition, _)] = await append_work(log, cfg, [Work().create(cm("a"))])
        worker = CommitWorker(cfg, log)
        with caplog.at_level(logging.ERROR, logger="pipeline.commit"):
            await worker.start()
            # The positive signal: the worker reached the push and reported the missing variable.
            await wait_for(
                lambda: any("credentials rejected" in r.getMessage() for r in caplog.records),
                "the push to be refused",
                timeout_s=120,
            )
            await worker.stop()
        committed = await committed_offset(log, cfg, partition)
    finally:
        await log.close()
    assert committed == 0, "nothing may be settled before the push lands"
    assert any("TEST_GIT_PASSWORD is not set" in r.getMessage() for r in caplog.records)
