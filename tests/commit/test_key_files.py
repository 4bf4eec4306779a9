"""No key material left behind: a provider's files in the worker's keys directory go when the
provider leaves the configuration, when its Secret no longer yields them, and at start for
providers the configuration lacks.

SecretAccess is driven directly (no remote is contacted: `current()` is what every remote
operation asks first), the Secret from the in-memory reader of tests/commit/clusterobjects.py;
the key files are real files, and the commit worker is the real one.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pipeline.commit.consumer import CommitWorker
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.keyfiles import KeyFile, key_path, kinds_in_use, remove_files, remove_unconfigured
from pipeline.commit.git.repo import GitRemoteError
from pipeline.config import (
    ClusterSettings,
    LogSettings,
    ProviderSettings,
    Settings,
    SigningSettings,
    SshSettings,
    TargetSettings,
)
from pipeline.log import open_log
from tests.commit.clusterobjects import SECRET, Objects
from tests.conftest import unique_prefix

SSH_URL = "ssh://git@127.0.0.1:1/repo.git"  # never connected to: only the files are looked at
KEY = b"-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
HOSTS = b"127.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"


def ssh_provider(name: str = "sec") -> ProviderSettings:
    return ProviderSettings(
        name=name, url=SSH_URL, credentials_secret={"namespace": "team-a", "name": "git-creds"}
    )


def files_of(keys: Path) -> list[str]:
    return sorted(p.name for p in keys.iterdir()) if keys.is_dir() else []


def test_kinds_in_use_follow_the_provider_settings() -> None:
    plain = ProviderSettings(name="p", url="https://example.com/r.git")
    assert kinds_in_use(plain) == frozenset()
    env = ProviderSettings(
        name="p",
        url=SSH_URL,
        ssh=SshSettings(private_key_env="K", allow_unknown_host_keys=True),
        signing=SigningSettings(format="ssh", key_env="S"),
    )
    assert kinds_in_use(env) == {KeyFile.SSH_KEY, KeyFile.PINNED_KNOWN_HOSTS, KeyFile.SIGNING_KEY}
    assert kinds_in_use(ssh_provider()) == {KeyFile.SECRET_KEY, KeyFile.SECRET_KNOWN_HOSTS}


def test_at_start_only_the_files_of_configured_providers_and_kinds_stay(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ["sec.secret-key", "sec.ssh-key", "a.b.secret-key", "gone.known_hosts", "gone.signing-key"]:
        (keys / name).write_text("x")
    (keys / "notes.txt").write_text("not ours to judge")
    providers = [ssh_provider(), ssh_provider("a.b")]
    removed = remove_unconfigured(keys, providers)
    assert sorted(p.name for p in removed) == ["gone.known_hosts", "gone.signing-key", "sec.ssh-key"]
    assert files_of(keys) == ["a.b.secret-key", "notes.txt", "sec.secret-key"]
    assert remove_unconfigured(tmp_path / "absent", providers) == []


async def test_a_secret_that_no_longer_yields_an_ssh_key_leaves_no_key_file(tmp_path: Path) -> None:
    keys, objects = tmp_path / "keys", Objects()
    access = SecretAccess(ssh_provider(), keys, objects.read)
    objects.data[SECRET] = {"ssh-privatekey": KEY, "known_hosts": HOSTS}
    transport = (await access.current())[1]
    assert transport is not None
    assert transport.key_file == key_path(keys, "sec", KeyFile.SECRET_KEY)
    assert files_of(keys) == ["sec.secret-key", "sec.secret-known_hosts"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in keys.iterdir())

    # rotated to basic credentials (no key for an SSH remote): refused, read again, nothing left
    objects.data[SECRET] = {"username": b"u", "password": b"p"}
    await access.outcome(refused=True)
    with pytest.raises(GitRemoteError, match="has none of the keys ssh-privatekey"):
        await access.current()
    assert files_of(keys) == []

    # the key comes back, then the Secret is deleted: nothing to fall back on, nothing left
    objects.data[SECRET] = {"identity": KEY, "known_hosts": HOSTS}
    await access.current()
    assert files_of(keys) == ["sec.secret-key", "sec.secret-known_hosts"]
    del objects.data[SECRET]
    await access.outcome(refused=True)
    with pytest.raises(GitRemoteError, match="does not exist"):
        await access.current()
    assert files_of(keys) == []


async def test_known_hosts_moved_from_the_secret_to_a_configmap_rewrite_only_what_is_used(
    tmp_path: Path,
) -> None:
    keys, objects = tmp_path / "keys", Objects()
    provider = ProviderSettings.model_validate(
        {**ssh_provider().model_dump(), "ssh": {"allow_unknown_host_keys": True}}
    )
    access = SecretAccess(provider, keys, objects.read)
    objects.data[SECRET] = {"ssh-privatekey": KEY, "known_hosts": HOSTS}
    await access.current()
    assert files_of(keys) == ["sec.secret-key", "sec.secret-known_hosts"]
    # known_hosts dropped from the Secret: host keys are pinned on first use, the Secret's file goes
    objects.data[SECRET] = {"ssh-privatekey": KEY}
    await access.outcome(refused=True)
    transport = (await access.current())[1]
    assert transport is not None
    assert not transport.strict
    assert files_of(keys) == ["sec.known_hosts", "sec.secret-key"]


async def test_a_retired_access_removes_its_files_and_gives_nothing_until_configured_again(
    tmp_path: Path,
) -> None:
    keys, objects = tmp_path / "keys", Objects()
    objects.data[SECRET] = {"ssh-privatekey": KEY, "known_hosts": HOSTS}
    access = SecretAccess(ssh_provider(), keys, objects.read)
    await access.current()
    access.retire()
    assert files_of(keys) == []
    with pytest.raises(GitRemoteError, match="no longer configured"):
        await access.current()
    assert files_of(keys) == []
    access.configure(ssh_provider(), None)
    await access.current()
    assert files_of(keys) == ["sec.secret-key", "sec.secret-known_hosts"]


def env_provider(name: str, tmp_path: Path) -> ProviderSettings:
    """An SSH provider whose key comes from TEST_SSH_KEY (written to `<name>.ssh-key`)."""
    ssh = SshSettings(private_key_env="TEST_SSH_KEY", known_hosts_file=tmp_path / "known_hosts")
    return ProviderSettings(name=name, url=SSH_URL, ssh=ssh)


def worker_settings(tmp_path: Path, providers: list[ProviderSettings]) -> Settings:
    return Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        clusters=[ClusterSettings(name="default")],
        providers=[ProviderSettings(name="local", url=str(tmp_path / "r.git")), *providers],
        targets=[TargetSettings(name="t", provider="local", path="t")],
    )


async def test_the_commit_worker_removes_a_removed_providers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `CommitWorker.apply`, the path of a new configuration version and of a SIGHUP reload
    (tests/service/test_reload_key_files.py drives the reload itself)."""
    monkeypatch.setenv("TEST_SSH_KEY", KEY.decode())
    env = env_provider("env", tmp_path)
    cfg = worker_settings(tmp_path, [ssh_provider(), env])
    keys = cfg.workdir / "keys"
    keys.mkdir(parents=True)
    (keys / "earlier.secret-key").write_text("left by a provider this configuration lacks")
    objects = Objects()
    objects.data[SECRET] = {"ssh-privatekey": KEY, "known_hosts": HOSTS}
    worker = CommitWorker(cfg, open_log(cfg))
    worker.use_object_reader(objects.read)
    assert files_of(keys) == ["env.ssh-key"], "the unconfigured provider's file went at start"
    secret_access = worker._access["sec"].remote
    assert isinstance(secret_access, SecretAccess)
    await secret_access.current()
    assert files_of(keys) == ["env.ssh-key", "sec.secret-key", "sec.secret-known_hosts"]

    await worker.apply(worker_settings(tmp_path, []))
    assert files_of(keys) == []
    with pytest.raises(GitRemoteError, match="no longer configured"):
        await secret_access.current()  # a branch still running with it writes nothing again
    assert files_of(keys) == []

    # the provider comes back: the same access (a running branch's) reads the Secret again
    await worker.apply(worker_settings(tmp_path, [ssh_provider()]))
    await secret_access.current()
    assert files_of(keys) == ["sec.secret-key", "sec.secret-known_hosts"]

    # the provider switches to an environment key: the Secret's files go, the access follows the file
    switched = env_provider("sec", tmp_path)
    await worker.apply(worker_settings(tmp_path, [switched]))
    assert files_of(keys) == ["sec.ssh-key"]
    transport = (await secret_access.current())[1]
    assert transport is not None
    assert transport.key_file == key_path(keys, "sec", KeyFile.SSH_KEY)
    assert files_of(keys) == ["sec.ssh-key"]


def test_removing_files_of_kinds_reports_only_what_existed(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "p.signing-key").write_text("x")
    assert remove_files(keys, "p") == [keys / "p.signing-key"]
    assert remove_files(keys, "p") == []
