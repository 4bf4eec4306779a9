"""SSH remotes against a real sshd, and signed commits verified by `git verify-commit`.

Real parts: Debian's sshd on a loopback address with a bare repository behind it, ssh-keygen keys
and GnuPG keys generated in each test, the worker's own commit objects pushed over SSH.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.access import provider_access
from pipeline.commit.git.repo import GitRemoteError
from pipeline.config import (
    ConfigError,
    ProviderSettings,
    Settings,
    SigningSettings,
    SshSettings,
    TargetSettings,
)
from tests.commit.helpers import ALICE, Work, cm, git
from tests.support.gitsign import COMMITTER, keygen, verify_all
from tests.support.sshd import SshServer, running_sshd

KEY_SPEC = ("ed25519", "sign", "never")


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    with running_sshd(tmp_path / "sshd") as server:
        yield server


def init_bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def has_main(remote: Path) -> bool:
    found = subprocess.run(["git", "-C", str(remote), "rev-parse", "-q", "--verify", "main"], check=False)
    return found.returncode == 0


def stop_gpg_agent(home: Path) -> None:
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)


def provider(url: str, **extra: object) -> ProviderSettings:
    return ProviderSettings(
        name="git", url=url, commit_window_s=0, push_cooldown_s=0, committer=COMMITTER, **extra
    )


async def commit_and_push(tmp_path: Path, prov: ProviderSettings, *names: str) -> BranchWorker:
    """One commit per ConfigMap by alice, pushed through the provider's access."""
    settings = Settings(
        workdir=tmp_path / "work",
        providers=[prov],
        targets=[TargetSettings(name="t1", provider="git", path="live")],
    )
    access = provider_access(prov, None, tmp_path / "work" / "keys")
    repo = access.clone(tmp_path / "clones", prov.name, "main", prov.url)
    worker = BranchWorker(settings, prov, "main", repo, lambda _: None)
    await worker.sync()
    work = Work()
    for name in names:
        await worker.handle(work.create(cm(name), ALICE))
    assert await worker.stop()
    return worker


def test_ssh_settings_are_validated() -> None:
    url = "ssh://git@example.com/r.git"
    with pytest.raises(ValueError, match="exactly one of private_key_file and private_key_env"):
        ProviderSettings(name="p", url=url, ssh=SshSettings(known_hosts_file=Path("kh")))
    with pytest.raises(ValueError, match="exactly one of private_key_file and private_key_env"):
        SshSettings(private_key_env="KEY", private_key_file=Path("k"), known_hosts_file=Path("kh"))
    with pytest.raises(ValueError, match="known_hosts_file is required"):
        ProviderSettings(name="p", url=url, ssh=SshSettings(private_key_env="KEY"))
    with pytest.raises(ValueError, match="exactly one of key_file, key_env and key_secret"):
        SigningSettings(format="ssh")


async def test_push_over_ssh_url_with_key_file_and_known_hosts(tmp_path: Path, sshd: SshServer) -> None:
    remote = sshd.bare_repo()
    ssh = SshSettings(private_key_file=sshd.client_key, known_hosts_file=sshd.known_hosts())
    await commit_and_push(tmp_path, provider(sshd.ssh_url(remote), ssh=ssh), "a", "b")
    assert git(remote, "log", "--format=%an|%s", "main").splitlines() == [
        "Alice Example|[CREATE] v1/configmaps/b",
        "Alice Example|[CREATE] v1/configmaps/a",
    ]


async def test_push_over_scp_like_url_with_key_from_env(
    tmp_path: Path, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = sshd.bare_repo()
    monkeypatch.setenv("GIT_SSH_KEY", sshd.client_key.read_text(encoding="ascii"))
    ssh = SshSettings(private_key_env="GIT_SSH_KEY", known_hosts_file=sshd.known_hosts())
    await commit_and_push(tmp_path, provider(sshd.scp_url(remote), ssh=ssh), "a")
    assert git(remote, "log", "--format=%s", "main").strip() == "[CREATE] v1/configmaps/a"
    written = tmp_path / "work" / "keys" / "git.ssh-key"
    assert oct(written.stat().st_mode & 0o777) == "0o600"


async def test_unknown_host_key_is_refused_unless_allowed(tmp_path: Path, sshd: SshServer) -> None:
    remote = sshd.bare_repo()
    other = tmp_path / "other_known_hosts"
    impostor = keygen(tmp_path / "impostor")
    other.write_text(f"{sshd.host} {impostor.with_suffix('.pub').read_text()}", encoding="ascii")
    strict = SshSettings(private_key_file=sshd.client_key, known_hosts_file=other)
    with pytest.raises(GitRemoteError, match="host key not trusted"):
        await commit_and_push(tmp_path / "strict", provider(sshd.ssh_url(remote), ssh=strict), "a")
    assert not has_main(remote), "nothing reached the remote"

    trusting = SshSettings(private_key_file=sshd.client_key, allow_unknown_host_keys=True)
    await commit_and_push(tmp_path / "tofu", provider(sshd.ssh_url(remote), ssh=trusting), "a")
    pinned = (tmp_path / "tofu" / "work" / "keys" / "git.known_hosts").read_text(encoding="ascii")
    assert sshd.host_public_key.split()[1] in pinned


async def test_wrong_client_key_is_an_auth_error(tmp_path: Path, sshd: SshServer) -> None:
    remote = sshd.bare_repo()
    stranger = keygen(tmp_path / "stranger")
    ssh = SshSettings(private_key_file=stranger, known_hosts_file=sshd.known_hosts())
    with pytest.raises(GitRemoteError, match="credentials rejected") as failed:
        await commit_and_push(tmp_path, provider(sshd.ssh_url(remote), ssh=ssh), "a")
    assert failed.value.auth


async def test_ssh_signed_commits_verify(tmp_path: Path) -> None:
    remote = init_bare(tmp_path / "remote.git")
    key = keygen(tmp_path / "signing")
    signing = SigningSettings(format="ssh", key_file=key)
    await commit_and_push(tmp_path, provider(str(remote), signing=signing), "a", "b")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{COMMITTER.email} {key.with_suffix('.pub').read_text()}", encoding="ascii")
    config = ("-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")
    lines = verify_all(remote, None, *config)
    assert lines == [f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"] * 2


def gpg_home_with_key(tmp_path: Path, uid: str) -> Path:
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key", uid, *KEY_SPEC],
        check=True,
        capture_output=True,
    )
    return home


async def test_openpgp_signed_commits_verify(tmp_path: Path) -> None:
    remote = init_bare(tmp_path / "remote.git")
    home = gpg_home_with_key(tmp_path, f"{COMMITTER.name} <{COMMITTER.email}>")
    signing = SigningSettings(format="openpgp", gpg_home=home, key_id=COMMITTER.email)
    try:
        await commit_and_push(tmp_path, provider(str(remote), signing=signing), "a", "b")
        env = {**os.environ, "GNUPGHOME": str(home)}
        lines = verify_all(remote, env)
        assert lines == [f"G|{COMMITTER.name} <{COMMITTER.email}>|{COMMITTER.name} <{COMMITTER.email}>"] * 2
    finally:
        stop_gpg_agent(home)


def test_openpgp_key_must_match_the_committer(tmp_path: Path) -> None:
    home = gpg_home_with_key(tmp_path, "Someone Else <else@example.com>")
    signing = SigningSettings(format="openpgp", gpg_home=home, key_id="else@example.com")
    try:
        with pytest.raises(ConfigError, match=r"no user id with the committer email bot@reverser\.example"):
            provider_access(provider("/nowhere", signing=signing), None, tmp_path / "keys")
    finally:
        stop_gpg_agent(home)
