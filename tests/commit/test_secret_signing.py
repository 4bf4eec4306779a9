"""Commits signed with the SSH key of a Secret (`signing.key_secret`, a GitProvider's
`spec.commit.signing.secretRef`), verified by the real `git verify-commit` with an allowed-signers
file holding the public key the worker reports (GitProvider `status.signingPublicKey`).

Real parts: ssh-keygen keys made per test, the worker's commit objects on a real bare remote, git's
own verification. The Secret comes from the in-memory reader of tests/commit/clusterobjects.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.codec.credentials_report import CredentialsReport
from pipeline.commit.branch import BranchWorker
from pipeline.commit.consumer import CommitWorker
from pipeline.commit.git.access import provider_access
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.repo import GitRemoteError
from pipeline.commit.git.signing import SecretSigner, SigningError
from pipeline.config import (
    ClusterSettings,
    LogSettings,
    ProviderSettings,
    Settings,
    SigningSettings,
    TargetSettings,
)
from pipeline.log import open_log
from tests.commit.clusterobjects import Objects
from tests.commit.helpers import ALICE, Work, cm
from tests.conftest import unique_prefix
from tests.support.gitsign import COMMITTER, keygen, verify_all

SIGNER = ("Secret", "team-a", "signer")
PASSPHRASE = "sign-pass-77"


def signing_provider(remote: Path) -> ProviderSettings:
    return ProviderSettings(
        name="git",
        url=str(remote),
        commit_window_s=0,
        push_cooldown_s=0,
        committer=COMMITTER,
        signing=SigningSettings(format="ssh", key_secret={"namespace": "team-a", "name": "signer"}),
    )


def init_bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def locked_key(path: Path) -> Path:
    """An ed25519 key protected by PASSPHRASE."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", PASSPHRASE, "-f", str(path)], check=True)
    return path


def tip_fingerprint(remote: Path, config: tuple[str, ...]) -> str:
    """The fingerprint of the key that signed the tip of main."""
    argv = ["git", *config, "-C", str(remote), "log", "-1", "--format=%GK", "main"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def fingerprint(key: Path) -> str:
    argv = ["ssh-keygen", "-l", "-f", str(key.with_suffix(".pub"))]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()[1]


def worker_for(
    tmp_path: Path, provider: ProviderSettings, objects: Objects, reports: list[CredentialsReport]
) -> tuple[BranchWorker, SecretAccess]:
    async def report(found: CredentialsReport) -> None:
        reports.append(found)

    keys = tmp_path / "work" / "keys"
    remote = SecretAccess(provider, keys, objects.read, report=report)
    access = provider_access(provider, None, keys, remote)
    settings = Settings(
        workdir=tmp_path / "work",
        providers=[provider],
        targets=[TargetSettings(name="t1", provider="git", path="live")],
    )
    repo = access.clone(tmp_path / "clones", provider.name, "main", provider.url)
    return BranchWorker(settings, provider, "main", repo, lambda _: None), remote


async def test_commits_are_signed_with_the_secrets_key_and_verify(tmp_path: Path) -> None:
    remote = init_bare(tmp_path / "remote.git")
    key = locked_key(tmp_path / "signing")
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    provider = signing_provider(remote)
    worker, access = worker_for(tmp_path, provider, objects, reports)

    # no Secret yet: the branch cannot sync, so nothing is committed unsigned
    with pytest.raises(GitRemoteError, match="Secret team-a/signer does not exist"):
        await worker.sync()
    assert (reports[-1].ok, reports[-1].reason, reports[-1].secret) == (False, "not_found", "team-a/signer")
    # a Secret without a key, then with the wrong passphrase: named, never shown
    objects.data[SIGNER] = {"username": b"u"}
    with pytest.raises(
        GitRemoteError, match=r"has none of the signing key keys signing\.key, ssh-privatekey"
    ):
        await worker.sync()
    objects.data[SIGNER] = {"signing.key": key.read_bytes(), "signing.passphrase": b"wrong-pass"}
    with pytest.raises(
        GitRemoteError, match=r"cannot be opened with the passphrase of key passphrase or signing\.passphrase"
    ):
        await worker.sync()
    assert reports[-1].reason == "invalid_key"
    assert all("wrong-pass" not in r.message for r in reports)

    objects.data[SIGNER] = {"signing.key": key.read_bytes(), "signing.passphrase": PASSPHRASE.encode()}
    await worker.sync()
    work = Work()
    for name in ("a", "b"):
        await worker.handle(work.create(cm(name), ALICE))
    assert await worker.stop()

    public = key.with_suffix(".pub").read_text(encoding="ascii").split()
    assert access.signer.public_key.split() == public[:2]
    assert (reports[-1].ok, reports[-1].signing_public_key) == (True, access.signer.public_key)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{COMMITTER.email} {access.signer.public_key}\n", encoding="ascii")
    config = ("-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")
    lines = verify_all(remote, None, *config)
    assert lines == [f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"] * 2
    # the unlocked key was on disk only while ssh-keygen signed
    assert list((tmp_path / "work" / "keys").glob("*")) == []


async def test_a_rotated_signing_key_signs_from_the_next_read_on(tmp_path: Path) -> None:
    remote = init_bare(tmp_path / "remote.git")
    first, second = keygen(tmp_path / "first"), keygen(tmp_path / "second")
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    provider = signing_provider(remote).model_copy(update={"credentials_refresh_s": 0.0})
    worker, access = worker_for(tmp_path, provider, objects, reports)
    objects.data[SIGNER] = {"ssh-privatekey": first.read_bytes()}
    await worker.sync()
    work = Work()
    await worker.handle(work.create(cm("a"), ALICE))
    assert await worker.push()
    # rotated in the Secret, then read again (here after a refusal; every credentials_refresh_s
    # too, tests/commit/test_credentials_refresh.py): the next commit is signed with the new key
    objects.data[SIGNER] = {"ssh-privatekey": second.read_bytes()}
    await access.outcome(refused=True)
    await access.current()
    await worker.handle(work.create(cm("b"), ALICE))
    assert await worker.push()
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(
        "".join(f"{COMMITTER.email} {k.with_suffix('.pub').read_text()}" for k in (first, second)),
        encoding="ascii",
    )
    config = ("-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")
    assert len(verify_all(remote, None, *config)) == 2
    assert tip_fingerprint(remote, config) == fingerprint(second)


def test_a_secret_signer_never_signs_without_its_key(tmp_path: Path) -> None:
    signer = SecretSigner(tmp_path / "p.secret-signing-key", "team-a/signer")
    with pytest.raises(SigningError, match="signing key of Secret team-a/signer has not been read"):
        signer.sign(b"payload")
    signer.stop()
    assert signer.sign(b"payload") is None, "a provider that signs no more: unsigned"


async def test_the_commit_worker_signs_running_branches_as_the_provider_now_says(tmp_path: Path) -> None:
    """The worker's wiring: every clone of a provider reading the cluster signs through its
    SecretAccess's signer, so signing from a Secret starts, moves to a file key and stops in running
    branches too; without a cluster a signing key_secret cannot be used and says so."""
    remote_path = init_bare(tmp_path / "remote.git")
    key, file_key = keygen(tmp_path / "secret-key"), keygen(tmp_path / "file-key")
    objects = Objects()
    objects.data[SIGNER] = {"signing.key": key.read_bytes()}
    objects.data[("Secret", "team-a", "creds")] = {"bearerToken": b"t"}
    plain = ProviderSettings(
        name="git",
        url=str(remote_path),
        committer=COMMITTER,
        credentials_secret={"namespace": "team-a", "name": "creds"},
    )

    def settings(provider: ProviderSettings) -> Settings:
        return Settings(
            workdir=tmp_path / "work",
            log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
            clusters=[ClusterSettings(name="default")],
            providers=[provider],
            targets=[TargetSettings(name="t", provider="git", path="t")],
        )

    cfg = settings(plain)
    worker = CommitWorker(cfg, open_log(cfg))
    worker.use_object_reader(objects.read)
    access = worker._access["git"]  # what a running branch's clone holds
    assert isinstance(access.remote, SecretAccess)
    assert access.signer is access.remote.signer
    await access.remote.current()
    assert access.signer.sign(b"payload") is None, "not signing yet"

    signing = SigningSettings(format="ssh", key_secret={"namespace": "team-a", "name": "signer"})
    await worker.apply(settings(plain.model_copy(update={"signing": signing})))
    await access.remote.current()
    assert b"BEGIN SSH SIGNATURE" in (access.signer.sign(b"payload") or b"")
    assert access.signer.public_key.split() == key.with_suffix(".pub").read_text().split()[:2]

    by_file = SigningSettings(format="ssh", key_file=file_key)
    await worker.apply(settings(plain.model_copy(update={"signing": by_file})))
    await access.remote.current()
    assert access.signer.public_key == ""
    assert b"BEGIN SSH SIGNATURE" in (access.signer.sign(b"payload") or b""), "the file key signs"

    await worker.apply(settings(plain))
    await access.remote.current()
    assert access.signer.sign(b"payload") is None

    with pytest.raises(Exception, match="the key is in Secret team-a/signer"):
        provider_access(signing_provider(remote_path), None, tmp_path / "keys")
