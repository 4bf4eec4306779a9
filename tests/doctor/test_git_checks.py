"""`reverser doctor` against real Git remotes: a bare file remote and smart HTTP (git http-backend),
healthy, unreachable, with wrong credentials and refusing pushes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.doctor.git_checks import check_providers
from pipeline.doctor.report import Check, Status
from pipeline.gitcredentials import CredentialsError, CredentialsReason
from tests.commit.helpers import bare_remote, git
from tests.commit.httpgit import GitHttpServer

PASSWORD = "s3cret-token"


@pytest.fixture(autouse=True)
def git_username(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCTOR_GIT_USERNAME", "git-user")


def seeded_remote(path: Path) -> Path:
    """A bare remote whose `main` has one commit (pushed from a scratch clone)."""
    bare_remote(path)
    work = path.parent / f"{path.name}-seed"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "README").write_text("seed\n")
    git(work, "add", "README")
    git(work, "-c", "user.name=seed", "-c", "user.email=seed@example.invalid", "commit", "-qm", "seed")
    git(work, "push", "-q", str(path), "main")
    return path


def settings_for(
    tmp_path: Path, url: str, *, branch: str = "main", password_env: str | None = None
) -> Settings:
    return Settings.model_validate(
        {
            "workdir": str(tmp_path / "work"),
            "providers": [
                {
                    "name": "git",
                    "url": url,
                    "password_env": password_env,
                    "username_env": "DOCTOR_GIT_USERNAME" if password_env else None,
                    # the test remote is plain HTTP on loopback
                    "allow_plain_http_credentials": password_env is not None,
                }
            ],
            "targets": [{"name": "t", "provider": "git", "branch": branch}],
        }
    )


def by_check(checks: list[Check]) -> dict[str, Check]:
    return {c.check: c for c in checks}


@pytest.fixture
def http_remote(tmp_path: Path) -> Iterator[tuple[GitHttpServer, Path]]:
    root = tmp_path / "srv"
    root.mkdir()
    repo = seeded_remote(root / "repo.git")
    with GitHttpServer(root, "git-user", PASSWORD) as server:
        yield server, repo


async def test_file_remote_that_accepts_pushes_passes(tmp_path: Path) -> None:
    remote = seeded_remote(tmp_path / "remote.git")
    before = git(remote, "rev-parse", "main")
    checks = by_check(await check_providers(settings_for(tmp_path, str(remote), branch="main")))
    assert checks["remote reachable"].status is Status.OK
    assert checks["branch main pushable"].status is Status.OK
    assert "exists" in checks["branch main pushable"].detail
    assert git(remote, "rev-parse", "main") == before, "a dry run must not move the branch"


async def test_a_new_branch_is_reported_as_would_be_created(tmp_path: Path) -> None:
    remote = seeded_remote(tmp_path / "remote.git")
    checks = by_check(await check_providers(settings_for(tmp_path, str(remote), branch="live")))
    assert checks["branch live pushable"].status is Status.OK
    assert "would be created" in checks["branch live pushable"].detail
    assert "live" not in git(remote, "branch", "--list")


async def test_missing_remote_fails_reachability_with_a_fix(tmp_path: Path) -> None:
    checks = by_check(await check_providers(settings_for(tmp_path, str(tmp_path / "nowhere.git"))))
    assert checks["remote reachable"].status is Status.FAIL
    assert "providers[git].url" in checks["remote reachable"].fix
    assert "branch main pushable" not in checks


async def test_unset_credential_variable_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCTOR_GIT_PASSWORD", raising=False)
    remote = seeded_remote(tmp_path / "remote.git")
    checks = by_check(
        await check_providers(settings_for(tmp_path, str(remote), password_env="DOCTOR_GIT_PASSWORD"))
    )
    assert checks["credentials"].status is Status.FAIL
    assert "DOCTOR_GIT_PASSWORD" in checks["credentials"].detail


async def test_smart_http_with_the_right_token_passes(
    http_remote: tuple[GitHttpServer, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = http_remote
    monkeypatch.setenv("DOCTOR_GIT_PASSWORD", PASSWORD)
    settings = settings_for(tmp_path, f"{server.base_url}/repo.git", password_env="DOCTOR_GIT_PASSWORD")
    checks = by_check(await check_providers(settings))
    assert [c.status for c in checks.values()] == [Status.OK, Status.OK, Status.OK]
    assert ("/repo.git/info/refs?service=git-receive-pack", 200) in server.requests, (
        "the dry run must reach the remote's receive-pack"
    )


async def test_smart_http_with_a_wrong_token_fails_authentication(
    http_remote: tuple[GitHttpServer, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = http_remote
    monkeypatch.setenv("DOCTOR_GIT_PASSWORD", "wrong")
    settings = settings_for(tmp_path, f"{server.base_url}/repo.git", password_env="DOCTOR_GIT_PASSWORD")
    checks = by_check(await check_providers(settings))
    assert checks["remote reachable"].status is Status.FAIL
    assert "refused the credentials from DOCTOR_GIT_PASSWORD" in checks["remote reachable"].fix
    assert PASSWORD not in str(checks)
    assert "wrong" not in checks["remote reachable"].detail


async def test_smart_http_remote_refusing_pushes_fails_the_push_check(
    http_remote: tuple[GitHttpServer, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, repo = http_remote
    git(repo, "config", "http.receivepack", "false")
    monkeypatch.setenv("DOCTOR_GIT_PASSWORD", PASSWORD)
    settings = settings_for(tmp_path, f"{server.base_url}/repo.git", password_env="DOCTOR_GIT_PASSWORD")
    checks = by_check(await check_providers(settings))
    assert checks["remote reachable"].status is Status.OK
    assert checks["branch main pushable"].status is Status.FAIL
    assert "refuses pushes to main" in checks["branch main pushable"].fix


async def test_credentials_from_a_secret_are_checked_as_the_worker_reads_them(
    http_remote: tuple[GitHttpServer, Path], tmp_path: Path
) -> None:
    """The Secret comes from an in-memory reader standing in for the apiserver's `get` (the real one
    is exercised in tests/e2e/test_custom_resources_rbac.py)."""
    server, _ = http_remote
    secrets: dict[str, bytes] = {}

    async def read(kind: str, namespace: str, name: str) -> Mapping[str, bytes]:
        if not secrets:
            raise CredentialsError(CredentialsReason.NOT_FOUND, f"{kind} {namespace}/{name} does not exist")
        return secrets

    settings = Settings.model_validate(
        {
            "workdir": str(tmp_path / "work"),
            "clusters": [{"name": "default"}],
            "providers": [
                {
                    "name": "git",
                    "url": f"{server.base_url}/repo.git",
                    "allow_plain_http_credentials": True,
                    "credentials_secret": {"namespace": "team-a", "name": "git-creds"},
                }
            ],
            "targets": [{"name": "t", "provider": "git", "branch": "main"}],
        }
    )
    missing = by_check(await check_providers(settings, read))
    assert missing["credentials"].detail.startswith("from Secret team-a/git-creds")
    assert missing["remote reachable"].status is Status.FAIL
    assert "Secret team-a/git-creds does not exist" in missing["remote reachable"].detail
    assert "fix Secret team-a/git-creds" in missing["remote reachable"].fix
    assert server.requests == []

    secrets.update({"username": b"git-user", "password": PASSWORD.encode()})
    checks = by_check(await check_providers(settings, read))
    assert [c.status for c in checks.values()] == [Status.INFO, Status.OK, Status.OK]
    assert PASSWORD not in str(checks)
