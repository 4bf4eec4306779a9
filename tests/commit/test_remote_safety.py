"""Credentials and URLs reach git only where they belong (12.7, 12.8), against real remotes.

The provider's Basic credentials go only to its own scheme, host and port, also for
`reverser replay branch --into`; a URL is never read as a git option.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.commit.git.repo import GitRemoteError, LocalRepo, PushRejected
from pipeline.commit.replay_cli import ReplayRequest, replay_branch
from pipeline.config import LogSettings, ProviderSettings, Settings, TargetSettings
from pipeline.exitcodes import ExitCode
from pipeline.log import open_log
from tests.commit.helpers import Work, bare_remote, cm, foreign_push, git, log_lines, replay_argv
from tests.commit.httpgit import GitHttpServer, serving
from tests.commit.logwork import append_work
from tests.conftest import unique_prefix
from tests.support.wait import wait_for

PASSWORD = "provider-Pa55word"


@pytest.fixture
def provider_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with serving(tmp_path / "provider", ["live.git", "rebuilt.git"], "git-user", PASSWORD) as srv:
        yield srv


@pytest.fixture
def stranger_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with serving(tmp_path / "stranger", ["empty.git"], "mallory", "mallory-password") as srv:
        yield srv


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        providers=[
            ProviderSettings(
                name="git",
                url=url,
                username_env="SAFETY_GIT_USER",
                password_env="SAFETY_GIT_PASSWORD",
                allow_plain_http_credentials=True,
                commit_window_s=0,
            )
        ],
        targets=[TargetSettings(name="t1", provider="git", path="live")],
    )


async def _with_work(cfg: Settings) -> None:
    log = open_log(cfg)
    await log.start()
    try:
        await append_work(log, cfg, [Work().create(cm("a"))])
    finally:
        await log.close()


def test_replay_into_another_host_gets_no_credentials(
    tmp_path: Path,
    provider_server: GitHttpServer,
    stranger_server: GitHttpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAFETY_GIT_USER", "git-user")
    monkeypatch.setenv("SAFETY_GIT_PASSWORD", PASSWORD)
    cfg = _settings(tmp_path, f"{provider_server.base_url}/live.git")
    asyncio.run(_with_work(cfg))

    elsewhere = ReplayRequest(provider="git", branch="main", into=f"{stranger_server.base_url}/empty.git")
    with pytest.raises(GitRemoteError, match="credentials rejected"):
        asyncio.run(replay_branch(cfg, elsewhere, lambda _: None))
    assert stranger_server.requests, "the replay never reached the other host"
    assert provider_server.expected not in stranger_server.authorizations

    # The provider's own origin (another repository on the same host and port) gets them.
    own = ReplayRequest(provider="git", branch="main", into=f"{provider_server.base_url}/rebuilt.git")
    commits = asyncio.run(replay_branch(cfg, own, lambda _: None))
    assert commits == 1
    assert log_lines(provider_server.root / "rebuilt.git", fmt="%s") == ["[CREATE] v1/configmaps/a"]


@pytest.mark.parametrize(
    "into",
    [
        "--upload-pack=touch pwned",
        "ext::sh -c touch% pwned",
        "git://h/r.git",
        "https://bot:hunter2-secret@git.example.com/r.git",
    ],
)
def test_replay_refuses_an_unsafe_into(tmp_path: Path, into: str, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _settings(tmp_path, str(bare_remote(tmp_path / "live.git")))
    cfg.embedded_log_dir.mkdir(parents=True)  # a workdir a service ran in: only the flag is wrong
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    argv = replay_argv(config, f"--into={into}")
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--into: " in err
    assert "hunter2" not in err
    assert not (tmp_path / "pwned").exists()


def test_replay_refuses_a_branch_git_would_read_as_an_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _settings(tmp_path, str(bare_remote(tmp_path / "live.git")))
    cfg.embedded_log_dir.mkdir(parents=True)  # a workdir a service ran in: only the flag is wrong
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    argv = ["replay", "branch", "--config", str(config), "--provider", "git", "--branch=--delete"]
    assert main(argv) == ExitCode.USAGE
    assert "--branch: branch name '--delete' starts with '-'" in capsys.readouterr().err


async def test_a_url_is_never_read_as_an_option(tmp_path: Path) -> None:
    """Without `--end-of-options`, git reads this URL as `--upload-pack` and runs `touch pwned`."""
    clone = tmp_path / "clone"
    for action in ("fetch", "push"):
        repo = LocalRepo(clone, "--upload-pack=touch pwned", None)
        operation = repo.fetch() if action == "fetch" else repo.push("main", "0" * 40, None)
        with pytest.raises(GitRemoteError, match="strange pathname"):
            await operation
        repo.close()
        assert not (clone / "pwned").exists()


async def test_a_push_overtaken_between_advertisement_and_update_is_a_moved_branch(tmp_path: Path) -> None:
    """The remote advertised the leased tip, then another push moved the branch before ours locked
    it: git answers `[remote rejected] (failed to update ref)`, a moved branch (fetch and replay),
    not a remote failure to back off from."""
    remote = bare_remote(tmp_path / "remote.git")
    foreign_push(remote, tmp_path, "a.txt", "1\n")
    hold, release = tmp_path / "hold", tmp_path / "release"
    hook = remote / "hooks" / "pre-receive"
    wait_for_release = f'while [ ! -e "{release}" ]; do sleep 0.05; done'
    hook.write_text(f'#!/bin/sh\nif [ -e "{hold}" ]; then rm "{hold}"; {wait_for_release}; fi\n')
    hook.chmod(0o755)
    repo = LocalRepo(tmp_path / "clone", str(remote), None)
    try:
        await repo.fetch()
        tip = repo.remote_ref("main")
        assert tip is not None
        ours = git(repo.path, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", "ours").strip()
        hold.touch()
        pushing = asyncio.create_task(repo.push("main", ours, tip))
        await wait_for(lambda: not hold.exists(), what="our push to reach the remote's hook", timeout_s=60)
        await asyncio.to_thread(foreign_push, remote, tmp_path, "b.txt", "2\n")
        release.touch()
        with pytest.raises(PushRejected, match="moved"):
            await pushing
    finally:
        repo.close()
    assert git(remote, "show", "main:b.txt") == "2\n"
