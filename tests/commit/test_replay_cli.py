"""`reverser replay branch`: rebuild from object-state or branch-work, into empty or drifted remotes."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.commit.git.repo import GitRemoteError
from pipeline.commit.replay_cli import ReplayRequest, replay_branch
from pipeline.config import LogSettings, ProviderSettings, SecretReference, Settings, TargetSettings
from pipeline.gitcredentials import CredentialsError, CredentialsReason
from tests.commit.helpers import ALICE, BOB, NOBODY, Work, bare_remote, cm, files, log_lines, replay_argv
from tests.commit.httpgit import serving
from tests.commit.logwork import commit_items
from tests.conftest import unique_prefix


def _settings(tmp_path: Path, remote: Path) -> Settings:
    return Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        providers=[ProviderSettings(name="git", url=str(remote), commit_window_s=0.3, push_cooldown_s=0.1)],
        targets=[
            TargetSettings(name="t1", provider="git", path="live", prune="Always"),
            TargetSettings(name="t2", provider="git", path="second", prune="OnEvent"),
        ],
    )


async def _live_run(cfg: Settings) -> None:
    w = Work(step_ms=200)
    other = Work(branch="other", start=0)
    items = [w.create(cm(f"c{i}"), (ALICE, BOB, NOBODY)[i % 3]) for i in range(9)]
    items += [other.create(cm("elsewhere"))]
    items += w.snapshot(3, [cm("c0"), cm("c1")], rv="55")
    items += [w.delete("c0", BOB, rv="60"), w.update(cm("c1", key="v9"), ALICE, rv="61")]
    t2 = Work(target="t2", path="second", start=w.offset, step_ms=200)
    t2.observed_ms = w.observed_ms + 10_000
    items += [t2.create(cm("u1"), BOB, rv="70"), t2.create(cm("u2"), BOB, rv="71"), t2.delete("u1", rv="72")]
    await commit_items(cfg, items)


def test_replay_branch_into_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    live = bare_remote(tmp_path / "live.git")
    cfg = _settings(tmp_path, live)
    asyncio.run(_live_run(cfg))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    into = tmp_path / "rebuilt.git"
    argv = replay_argv(config, "--into", str(into), "--from", "history")
    code = main(argv)
    assert code == 0
    out, err = capsys.readouterr()
    assert "replayed" in out
    assert "commit(s) on main" in out
    assert "replaying " in err, "a plain progress line when stderr is not a terminal"
    fmt = "%T|%an <%ae>|%s"
    assert log_lines(into, fmt=fmt) == log_lines(live, fmt=fmt)

    # into the same remote again: it reconciles, and there is nothing to change
    assert main(argv) == 0
    assert "0 commit(s) on main" in capsys.readouterr().out
    assert log_lines(into, fmt=fmt) == log_lines(live, fmt=fmt)


def test_replay_unknown_provider_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _settings(tmp_path, bare_remote(tmp_path / "r.git"))
    cfg.embedded_log_dir.mkdir(parents=True)  # a workdir a service ran in: only the provider is wrong
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    assert main(["replay", "branch", "--config", str(config), "--provider", "nope", "--branch", "main"]) == 2
    assert "unknown provider 'nope'" in capsys.readouterr().err


def _config(tmp_path: Path) -> tuple[Settings, Path, Path]:
    live = bare_remote(tmp_path / "live.git")
    cfg = _settings(tmp_path, live)
    asyncio.run(_live_run(cfg))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return cfg, live, config


def test_rebuild_from_object_state_into_an_empty_remote_has_the_live_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, live, config = _config(tmp_path)
    into = tmp_path / "rebuilt.git"
    base = replay_argv(config)
    assert main([*base, "--into", str(into)]) == 0
    out, err = capsys.readouterr()
    assert "rebuilt main from" in out
    assert "reading " in err
    assert files(into) == files(live)
    # the snapshot (prune Always) swept c2..c8, c0 was deleted, u1 deleted on t2
    assert sorted(files(live)) == ["live/team-a/configmaps/c1.yaml", "second/team-a/configmaps/u2.yaml"]
    # one commit per target, by the committer
    assert log_lines(into, fmt="%an|%s") == [
        "Reverser Pipeline|rebuilt t1 from " + _state_topic(config) + ": 1 change(s)",
        "Reverser Pipeline|rebuilt t2 from " + _state_topic(config) + ": 1 change(s)",
    ]
    # only one target: the other target's folder is left alone
    only = tmp_path / "only-t2.git"
    assert main([*base, "--into", str(only), "--target", "t2"]) == 0
    assert sorted(files(only)) == ["second/team-a/configmaps/u2.yaml"]
    assert main([*base, "--into", str(only), "--target", "nope"]) == 2
    assert "'nope' is not a target of git main" in capsys.readouterr().err


def _state_topic(config: Path) -> str:
    prefix: str = yaml.safe_load(config.read_text())["log"]["topic_prefix"]
    return prefix + ".object-state"


def test_rebuild_into_a_drifted_remote_adds_updates_and_removes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, live, config = _config(tmp_path)
    drifted = tmp_path / "drifted.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(live), str(drifted)], check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(drifted), str(clone)], check=True)
    (clone / "live/team-a/configmaps/c1.yaml").write_text("tampered: true\n")
    (clone / "second/team-a/configmaps/u2.yaml").unlink()
    (clone / "live/team-a/configmaps/stale.yaml").parent.mkdir(parents=True, exist_ok=True)
    (clone / "live/team-a/configmaps/stale.yaml").write_text("stale: true\n")
    (clone / "live/README.md").write_text("not an object document\n")
    for args in (
        ["add", "-A"],
        ["-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "drift"],
        ["push", "-q", "origin", "main"],
    ):
        subprocess.run(["git", "-C", str(clone), *args], check=True)

    argv = replay_argv(config, "--into", str(drifted))
    assert main(argv) == 0
    capsys.readouterr()
    expected = {**files(live), "live/README.md": "not an object document\n"}
    assert files(drifted) == expected
    assert log_lines(drifted, fmt="%s")[-2:] == [
        f"rebuilt t1 from {_state_topic(config)}: 2 change(s)",
        f"rebuilt t2 from {_state_topic(config)}: 1 change(s)",
    ]
    # a second rebuild finds nothing to do
    assert main(argv) == 0
    assert "0 commit(s) on main" in capsys.readouterr().out


def test_history_replay_into_a_branch_with_extra_documents_removes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, live, config = _config(tmp_path)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(live), str(clone)], check=True)
    (clone / "live/team-a/configmaps/ghost.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ghost\n  namespace: team-a\n"
    )
    # at an object's path but not that object's document: a user's file, kept (commit/ownership.py)
    (clone / "live/team-a/configmaps/notes.yaml").write_text("ghost: true\n")
    for args in (
        ["add", "-A"],
        ["-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "ghost"],
        ["push", "-q", "origin", "main"],
    ):
        subprocess.run(["git", "-C", str(clone), *args], check=True)
    before = files(live)
    argv = replay_argv(config, "--from", "history")
    assert main(argv) == 0
    capsys.readouterr()
    after = files(live)
    assert "live/team-a/configmaps/ghost.yaml" not in after
    assert after == {k: v for k, v in before.items() if not k.endswith("ghost.yaml")}
    assert after["live/team-a/configmaps/notes.yaml"] == "ghost: true\n"
    assert log_lines(live, fmt="%s")[-1] == "rebuilt t1 from history: 1 change(s)"


def test_replay_pushes_with_the_providers_secret(tmp_path: Path) -> None:
    """`replay branch` onto the provider's own smart-HTTP remote authenticates with its Secret, read
    as the commit worker reads it (an in-memory reader stands in for the apiserver's `get`, which
    tests/e2e/test_custom_resources_rbac.py runs for real)."""
    live = bare_remote(tmp_path / "live.git")
    cfg = _settings(tmp_path, live)
    asyncio.run(_live_run(cfg))
    secret: dict[str, bytes] = {}

    async def read(kind: str, namespace: str, name: str) -> Mapping[str, bytes]:
        if not secret:
            raise CredentialsError(CredentialsReason.NOT_FOUND, f"{kind} {namespace}/{name} does not exist")
        return secret

    with serving(tmp_path / "srv", ["repo.git"], "git-user", "replay-Pa55") as server:
        provider = cfg.providers[0].model_copy(
            update={
                "url": f"{server.base_url}/repo.git",
                "credentials_secret": SecretReference(namespace="team-a", name="git-creds"),
                "allow_plain_http_credentials": True,
            }
        )
        remote_cfg = cfg.model_copy(update={"providers": [provider]})
        with pytest.raises(GitRemoteError, match="Secret team-a/git-creds does not exist"):
            asyncio.run(replay_branch(remote_cfg, ReplayRequest(provider="git", branch="main"), reader=read))
        secret.update({"username": b"git-user", "password": b"replay-Pa55"})
        asyncio.run(replay_branch(remote_cfg, ReplayRequest(provider="git", branch="main"), reader=read))
    fmt = "%T|%an <%ae>|%s"
    assert log_lines(server.root / "repo.git", fmt=fmt) == log_lines(live, fmt=fmt)
