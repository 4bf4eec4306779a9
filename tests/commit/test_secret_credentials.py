"""Credentials from a provider's Secret against real remotes: smart HTTP with basic auth and a bearer
token (git http-backend on loopback) and SSH (a real sshd).

The Secret comes from an in-memory reader standing in for the Kubernetes API
(tests/commit/clusterobjects.py); everything else is real: git, the remotes, the key files, the metric.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.codec.credentials_report import CredentialsReport
from pipeline.commit import metrics
from pipeline.commit.consumer import CommitWorker
from pipeline.commit.git.access import provider_access
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.repo import GitRemoteError, LocalRepo
from pipeline.config import (
    ClusterSettings,
    LogSettings,
    ProviderSettings,
    Settings,
    SshSettings,
    TargetSettings,
)
from pipeline.gitcredentials import CredentialsReason
from pipeline.log import open_log
from tests.commit.clusterobjects import SECRET, Objects
from tests.commit.helpers import Work, cm, files
from tests.commit.httpgit import GitHttpServer, basic_authorization, serving
from tests.commit.logwork import append_work, committed_offset, wait_settled
from tests.conftest import unique_prefix
from tests.support.sshd import SshServer, running_sshd
from tests.support.wait import wait_for

PASSWORD = "s3cret-Pa55word"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with serving(tmp_path / "srv", ["repo.git"], "git-user", PASSWORD) as srv:
        yield srv


def written_with(root: Path, value: bytes) -> list[Path]:
    """Files of the worker (not the remote's) that contain `value`."""
    return [p for p in root.rglob("*") if p.is_file() and "srv" not in p.parts and value in p.read_bytes()]


def errors(provider: str, reason: CredentialsReason) -> float:
    return float(metrics.CREDENTIALS_ERRORS.labels(provider, reason)._value.get())


def http_provider(name: str, server: GitHttpServer) -> ProviderSettings:
    """A provider of the test's smart-HTTP remote whose credentials are in Secret team-a/git-creds."""
    return ProviderSettings(
        name=name,
        url=f"{server.base_url}/repo.git",
        credentials_secret={"namespace": "team-a", "name": "git-creds"},
        allow_plain_http_credentials=True,
    )


def clone(
    tmp_path: Path, provider: ProviderSettings, objects: Objects, reports: list[CredentialsReport]
) -> tuple[LocalRepo, SecretAccess]:
    async def report(found: CredentialsReport) -> None:
        reports.append(found)

    keys = tmp_path / "keys"
    remote = SecretAccess(provider, keys, objects.read, report=report)
    access = provider_access(provider, None, keys, remote)
    return access.clone(tmp_path / "clones", provider.name, "main", provider.url), remote


async def test_basic_credentials_from_a_secret_missing_created_rotated_and_fixed(
    tmp_path: Path, server: GitHttpServer
) -> None:
    provider = http_provider("http-secret", server)
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    repo, _ = clone(tmp_path, provider, objects, reports)

    # no Secret yet: no request reaches the remote, the reason names the Secret
    before = errors("http-secret", CredentialsReason.NOT_FOUND)
    with pytest.raises(GitRemoteError, match="Secret team-a/git-creds does not exist") as caught:
        await repo.fetch()
    assert caught.value.auth
    assert server.requests == []
    assert errors("http-secret", CredentialsReason.NOT_FOUND) == before + 1
    assert (reports[-1].ok, reports[-1].reason, reports[-1].secret) == (
        False,
        "not_found",
        "team-a/git-creds",
    )

    # a username without a password: the missing key is named, the value is not
    objects.data[SECRET] = {"username": b"git-user"}
    with pytest.raises(GitRemoteError, match="has key username but no key password"):
        await repo.fetch()
    assert "git-user" not in reports[-1].message

    objects.data[SECRET] = {"username": b"git-user", "password": PASSWORD.encode()}
    await repo.fetch()
    assert reports[-1].ok
    reads = objects.reads
    await repo.fetch()
    assert objects.reads == reads, "values are kept in memory while the remote takes them"

    # the remote's password is rotated and the Secret gets a wrong one: refused, counted, re-read
    server.expected = basic_authorization("git-user", "rotated-Pa55")
    objects.data[SECRET] = {"username": b"git-user", "password": b"typo-Pa55"}
    rejected = errors("http-secret", CredentialsReason.REJECTED)
    with pytest.raises(GitRemoteError, match="credentials rejected"):
        await repo.fetch()  # with the cached (old) password
    with pytest.raises(GitRemoteError, match="credentials rejected"):
        await repo.fetch()  # with the Secret read again: the wrong one
    assert objects.reads == reads + 1
    assert errors("http-secret", CredentialsReason.REJECTED) == rejected + 2
    assert (reports[-1].ok, reports[-1].reason) == (False, "rejected")
    assert "refused the credentials of Secret team-a/git-creds" in reports[-1].message
    assert all("typo-Pa55" not in r.message and PASSWORD not in r.message for r in reports)

    objects.data[SECRET] = {"username": b"git-user", "password": b"rotated-Pa55"}
    await repo.fetch()
    assert reports[-1].ok
    assert [r.ok for r in reports].count(True) == 2, "a report only when the state changes"
    assert not written_with(tmp_path, b"rotated-Pa55"), "HTTP credentials never touch disk"


async def test_a_bearer_token_travels_as_an_authorization_header(
    tmp_path: Path, server: GitHttpServer
) -> None:
    server.expected = "Bearer tok-123"
    provider = http_provider("bearer", server)
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    objects.data[SECRET] = {"bearerToken": b"tok-123"}
    repo, _ = clone(tmp_path, provider, objects, reports)
    assert await repo.remote_heads() == {}
    assert server.authorizations[-1] == "Bearer tok-123"
    assert "tok-123" not in repr(repo.auth)


async def test_an_ssh_key_for_an_http_remote_is_refused_by_name(
    tmp_path: Path, server: GitHttpServer
) -> None:
    provider = http_provider("wrong-kind", server)
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    objects.data[SECRET] = {"identity": b"KEY", "username": b"u", "password": b"p"}
    repo, _ = clone(tmp_path, provider, objects, reports)
    with pytest.raises(GitRemoteError, match=r"holds an SSH key .* is not an SSH remote"):
        await repo.fetch()
    assert server.requests == []
    assert reports[-1].reason == "missing_key"


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    with running_sshd(tmp_path / "sshd") as found:
        yield found


def locked_copy(key: Path, passphrase: str) -> str:
    copy = key.with_name("locked_ed25519")
    copy.write_bytes(key.read_bytes())
    os.chmod(copy, 0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", passphrase, "-f", str(copy)], check=True, input=b"")
    return copy.read_text()


async def test_ssh_key_and_host_trust_from_the_secret_or_a_configmap(tmp_path: Path, sshd: SshServer) -> None:
    remote = sshd.bare_repo()
    url = sshd.ssh_url(remote)
    provider = ProviderSettings(
        name="ssh-secret", url=url, credentials_secret={"namespace": "team-a", "name": "git-creds"}
    )
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    key = sshd.client_key.read_bytes()
    repo, _ = clone(tmp_path, provider, objects, reports)

    # a key but no known hosts anywhere: fail closed before connecting
    objects.data[SECRET] = {"ssh-privatekey": key}
    with pytest.raises(
        GitRemoteError, match="no key known_hosts and the provider sets no known-hosts reference"
    ):
        await repo.fetch()
    assert reports[-1].reason == "no_known_hosts"

    # key (Argo CD's spelling) and known_hosts in the Secret
    objects.data[SECRET] = {"sshPrivateKey": key, "known_hosts": sshd.known_hosts_line().encode()}
    assert await repo.remote_heads() == {}
    assert reports[-1].ok
    written = [p for p in (tmp_path / "keys").rglob("*") if p.is_file()]
    assert written
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in written)

    # a passphrase-protected key (Flux's spelling) with its passphrase, host keys from a ConfigMap
    hosts = {"kind": "ConfigMap", "namespace": "team-a", "name": "hosts"}
    with_ref = ProviderSettings.model_validate({**provider.model_dump(), "known_hosts_ref": hosts})
    objects.data[SECRET] = {
        "identity": locked_copy(sshd.client_key, "pass-phrase-9").encode(),
        "ssh-password": b"pass-phrase-9",
    }
    objects.data[("ConfigMap", "team-a", "hosts")] = {"ssh_known_hosts": sshd.known_hosts_line().encode()}
    repo2, _ = clone(tmp_path / "second", with_ref, objects, reports)
    assert await repo2.remote_heads() == {}

    # the wrong passphrase is named, not shown
    objects.data[SECRET]["ssh-password"] = b"not-it"
    repo3, _ = clone(tmp_path / "third", with_ref, objects, reports)
    with pytest.raises(GitRemoteError, match="cannot be opened with the passphrase") as caught:
        await repo3.fetch()
    assert "not-it" not in str(caught.value)


async def test_a_host_key_not_in_the_secret_is_refused(tmp_path: Path, sshd: SshServer) -> None:
    remote = sshd.bare_repo()
    provider = ProviderSettings(
        name="ssh-strange-host",
        url=sshd.ssh_url(remote),
        credentials_secret={"namespace": "team-a", "name": "git-creds"},
        ssh=SshSettings(),
    )
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    host = sshd.known_hosts_line().split(" ")[0]
    other = f"{host} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    objects.data[SECRET] = {"ssh-privatekey": sshd.client_key.read_bytes(), "known_hosts": other.encode()}
    repo, _ = clone(tmp_path, provider, objects, reports)
    with pytest.raises(GitRemoteError, match="host key not trusted"):
        await repo.fetch()
    assert reports == [], "a host key problem is not a credentials state"


async def test_the_commit_worker_waits_for_its_secret_and_then_pushes(
    tmp_path: Path, server: GitHttpServer
) -> None:
    """A file's provider with `credentials_secret`, through the whole worker on the embedded log: the
    work stays unsettled while the Secret is missing and lands once it exists."""
    cfg = Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        clusters=[ClusterSettings(name="default")],
        providers=[
            ProviderSettings(
                name="filed",
                url=f"{server.base_url}/repo.git",
                credentials_secret={"namespace": "team-a", "name": "git-creds"},
                allow_plain_http_credentials=True,
                commit_window_s=0,
                push_cooldown_s=0,
                push_max_backoff_s=0.5,
            )
        ],
        targets=[TargetSettings(name="t1", provider="filed", path="live")],
    )
    objects = Objects()
    log = open_log(cfg)
    await log.start()
    try:
        [(partition, _)] = await append_work(log, cfg, [Work(provider="filed").create(cm("a"))])
        worker = CommitWorker(cfg, log)
        worker.use_object_reader(objects.read)
        await worker.start()
        try:
            await wait_for(lambda: objects.reads >= 2, "the worker to try the missing Secret twice")
            assert await committed_offset(log, cfg, partition) == 0, "nothing settles without credentials"
            assert server.requests == []
            objects.data[SECRET] = {"username": b"git-user", "password": PASSWORD.encode()}
            await wait_settled(log, cfg)
        finally:
            await worker.stop()
    finally:
        await log.close()
    assert sorted(files(server.root / "repo.git")) == ["live/team-a/configmaps/a.yaml"]


async def test_a_changed_provider_reads_its_secret_again_an_unchanged_one_does_not(
    tmp_path: Path, server: GitHttpServer
) -> None:
    provider = http_provider("reconfigured", server)
    reports: list[CredentialsReport]
    objects, reports = Objects(), []
    objects.data[SECRET] = {"username": b"git-user", "password": PASSWORD.encode()}
    other = ("Secret", "team-a", "other-creds")
    objects.data[other] = {"bearerToken": b"tok-9"}
    repo, access = clone(tmp_path, provider, objects, reports)
    await repo.fetch()
    assert objects.reads == 1
    access.configure(
        ProviderSettings.model_validate(provider.model_dump()), None
    )  # a new version, same provider
    await repo.fetch()
    assert objects.reads == 1
    moved = ProviderSettings.model_validate(
        {**provider.model_dump(), "credentials_secret": {"namespace": "team-a", "name": "other-creds"}}
    )
    access.configure(moved, None)
    with pytest.raises(GitRemoteError, match="credentials rejected"):
        await repo.fetch()  # the other Secret's token: read at once, refused by this remote
    assert objects.reads == 2
    assert server.authorizations[-1] == "Bearer tok-9"
    assert reports[-1].secret == "team-a/other-creds"
