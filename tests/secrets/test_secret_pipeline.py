"""A Secret created, changed and deleted by a user, through every stage, on both log backends.

Real parts: the `sops` binary and age keys, the audit webhook over HTTP, the log backend under
test, the router, the commit worker, SSH-signed commits and a real sshd with host-key checking in
front of the bare repository. The Kubernetes API is the watch-protocol test server (kube-apiserver
does not run in this suite; the e2e suite covers the real one).
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pipeline.audit.component import build as build_audit
from pipeline.commit.component import build as build_commit
from pipeline.component import Component
from pipeline.config import (
    AuditRoute,
    AuditSettings,
    ClusterSettings,
    EncryptionSettings,
    MetricsSettings,
    ProviderSettings,
    Settings,
    SigningSettings,
    SshSettings,
    TargetSettings,
    WatchRule,
)
from pipeline.demo.runner import wait_until_committed
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames
from pipeline.router.component import build as build_router
from pipeline.service.app import Service
from pipeline.watch.component import WatchComponent
from tests.commit.helpers import bare_remote, git
from tests.secrets.keys import DIGEST_KEY, AgeKey, sops_decrypt
from tests.support.gitsign import COMMITTER, keygen, verify_all
from tests.support.logread import read_topic
from tests.support.net import free_port
from tests.support.sshd import SshServer, running_sshd
from tests.support.wait import wait_for
from tests.watch.conftest import fast_options
from tests.watch.kube_server import FakeKubeApiServer, running_server

PASSWORD_V1 = "correct-horse-battery-staple"
PASSWORD_V2 = "tr0ub4dor-and-3"
PATH = "live/shop/secrets/db.sops.yaml"
ROUTE = "src"


def secret(password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "shop"},
        "type": "Opaque",
        "data": {"password": base64.b64encode(password.encode()).decode()},
    }


def forbidden(*passwords: str) -> list[bytes]:
    """Every form a value could leak in: raw, and base64 as the API carries it."""
    return [p.encode() for p in passwords] + [base64.b64encode(p.encode()) for p in passwords]


def audit_event(verb: str, code: int, obj: dict[str, Any], request_rv: str = "") -> dict[str, Any]:
    """What the apiserver sends for a write by alice; the request carries the previous resourceVersion."""
    request: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    if verb != "delete":
        request = {**obj, "metadata": {"name": "db", "namespace": "shop", "resourceVersion": request_rv}}
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "RequestResponse",
        "auditID": str(uuid.uuid4()),
        "stage": "ResponseComplete",
        "verb": verb,
        "requestURI": f"/api/v1/namespaces/shop/secrets/{'' if verb == 'create' else 'db'}",
        "user": {"username": "alice", "extra": {"configbutler.ai/claims/email": ["alice@example.com"]}},
        "objectRef": {"resource": "secrets", "namespace": "shop", "name": "db", "apiVersion": "v1"},
        "responseStatus": {"code": code},
        # the apiserver sends the Secret itself at RequestResponse level: it must stop at the ingress
        "requestObject": request,
        "responseObject": obj,
        "stageTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


async def initial_snapshots(pipeline: Pipeline) -> None:
    """Until both streams (Secrets and ConfigMaps of `shop`) have completed their empty snapshots."""
    await wait_for(
        lambda: (
            len(pipeline.watch.manager.streams) == 2
            and all(s.snapshots_completed for s in pipeline.watch.manager.streams.values())
        ),
        what="the initial (empty) snapshots",
    )


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApiServer]:
    async with running_server() as server:
        yield server


@pytest.fixture
def age_key() -> AgeKey:
    return AgeKey.generate()


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    with running_sshd(tmp_path / "sshd") as server:
        yield server


@pytest.fixture
def signing_key(tmp_path: Path) -> Path:
    return keygen(tmp_path / "signing")


def pipeline_settings(
    settings: Settings, kubeconfig: Path, provider: ProviderSettings, recipient: str, audit_port: int
) -> Settings:
    return settings.model_copy(
        update={
            "audit": AuditSettings(
                addr=f"127.0.0.1:{audit_port}", allow_plain_http=True, routes=[AuditRoute(name=ROUTE)]
            ),
            "metrics": MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
            "clusters": [ClusterSettings(name=ROUTE, kubeconfig=kubeconfig)],
            "providers": [provider],
            "targets": [
                TargetSettings(
                    name="shop",
                    provider="git",
                    path="live",
                    cluster=ROUTE,
                    rules=[WatchRule(resources=["secrets", "configmaps"], namespaces=["shop"])],
                    encryption=EncryptionSettings(age_recipients=[recipient]),
                )
            ],
        }
    )


class Pipeline:
    def __init__(self, service: Service, watch: WatchComponent, remote: Path, audit_url: str) -> None:
        self.service = service
        self.watch = watch
        self.remote = remote
        self.audit_url = audit_url

    async def audit(self, event: dict[str, Any]) -> None:
        body = {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [event]}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.audit_url, data=json.dumps(body).encode()) as response,
        ):
            assert response.status == 200, await response.text()

    def history(self) -> list[str]:
        try:
            out = git(self.remote, "log", "--reverse", "--format=%H|%an <%ae>|%s", "main")
        except subprocess.CalledProcessError:
            return []
        return out.splitlines()

    async def wait_commits(self, count: int) -> list[str]:
        await wait_for(
            lambda: len(self.history()) >= count, what=f"{count} commit(s) on the remote", timeout_s=60
        )
        return self.history()


async def start_pipeline(settings: Settings, kube: FakeKubeApiServer, remote: Path) -> Pipeline:
    holder: list[WatchComponent] = []

    def build_watch(s: Settings, log: Log) -> Component:
        component = WatchComponent(s, log, options=fast_options(s))
        holder.append(component)
        return component

    service = Service(settings, factories=[build_audit, build_router, build_commit, build_watch])
    await service.start()
    return Pipeline(service, holder[0], remote, f"http://{settings.audit.addr}/audit-webhook/{ROUTE}")


async def topic_bytes(log: Log, settings: Settings) -> list[bytes]:
    """The raw bytes of every record (key, value, headers) of every pipeline topic."""
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    found: list[bytes] = []
    topics = (
        names.audit_facts,
        names.watch_events,
        names.watch_cursors,
        names.watch_claims,
        names.branch_work,
        names.dead_letter,
    )
    for topic in topics:
        for record in await read_topic(log, topic):
            found.extend([record.key or b"", record.value or b""])
            found.extend(value for _, value in record.headers)
    return found


def git_object_bytes(repo: Path) -> bytes:
    """Every object of a repository, decompressed (what the object store holds)."""
    return subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch-all-objects", "--batch"],
        check=True,
        capture_output=True,
    ).stdout


async def test_secret_lifecycle_is_encrypted_attributed_and_never_plaintext_on_the_log(
    settings: Settings,
    kube: FakeKubeApiServer,
    age_key: AgeKey,
    sshd: SshServer,
    signing_key: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REVERSER_SECRETS_DIGEST_KEY", DIGEST_KEY)
    remote_path = sshd.bare_repo()
    provider = ProviderSettings(
        name="git",
        url=sshd.scp_url(remote_path),
        commit_window_s=0,
        push_cooldown_s=0,
        committer=COMMITTER,
        ssh=SshSettings(private_key_file=sshd.client_key, known_hosts_file=sshd.known_hosts()),
        signing=SigningSettings(format="ssh", key_file=signing_key),
    )
    config = pipeline_settings(settings, kube.kubeconfig(tmp_path), provider, age_key.recipient, free_port())
    kube.namespaces["shop"] = "Active"
    pipeline = await start_pipeline(config, kube, remote_path)
    try:
        await initial_snapshots(pipeline)
        created = kube.put(secret(PASSWORD_V1))
        await pipeline.audit(audit_event("create", 201, created))
        history = await pipeline.wait_commits(1)
        first = git(remote_path, "show", f"main:{PATH}").encode()
        assert sops_decrypt(first, age_key, tmp_path)["data"] == secret(PASSWORD_V1)["data"]

        changed = kube.put(secret(PASSWORD_V2))
        await pipeline.audit(audit_event("update", 200, changed, created["metadata"]["resourceVersion"]))
        history = await pipeline.wait_commits(2)
        second = git(remote_path, "show", f"main:{PATH}").encode()
        assert sops_decrypt(second, age_key, tmp_path)["data"] == secret(PASSWORD_V2)["data"]

        # a resync of the unchanged Secret: a new snapshot re-encrypts it (new ciphertext) and
        # the worker, comparing keyed digests, makes no commit
        streams = list(pipeline.watch.manager.streams.values())
        assert len(streams) == 2, "both streams resync"
        done = {id(s): s.snapshots_completed for s in streams}
        for stream in streams:
            await stream.resnapshot()
        await wait_for(
            lambda: all(s.snapshots_completed > done[id(s)] for s in streams), what="resync snapshots"
        )
        # caught up twice: once the router committed everything, its branch work is all appended
        await wait_until_committed(pipeline.service.log, config)
        await wait_until_committed(pipeline.service.log, config)
        assert pipeline.history() == history

        kube.delete(("v1", "Secret"), "shop", "db")
        deleted = {**changed, "metadata": {**changed["metadata"], "resourceVersion": str(kube.rv)}}
        await pipeline.audit(audit_event("delete", 200, deleted))
        history = await pipeline.wait_commits(3)
        assert PATH not in git(remote_path, "ls-tree", "-r", "--name-only", "main")

        authors = [line.split("|")[1] for line in history]
        assert authors == ["alice <alice@example.com>"] * 3, history
        allowed = tmp_path / "allowed_signers"
        public_key = signing_key.with_suffix(".pub").read_text(encoding="ascii")
        allowed.write_text(f"{COMMITTER.email} {public_key}", encoding="ascii")
        config_args = ("-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")
        signed = f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"
        assert verify_all(remote_path, None, *config_args) == [signed] * 3
        leaks = forbidden(PASSWORD_V1, PASSWORD_V2)
        records = await topic_bytes(pipeline.service.log, config)
        assert records, "the topics were read"
        assert not [leak for leak in leaks for value in records if leak in value]
        objects = git_object_bytes(remote_path)
        assert b"ENC[AES256_GCM" in objects
        assert not [leak for leak in leaks if leak in objects]
        if config.log.effective_backend == "embedded":
            raw = b"".join(p.read_bytes() for p in config.workdir.rglob("*") if p.is_file())
            assert b"sops" in raw, "the segment files were read"
            assert not [leak for leak in leaks if leak in raw]
    finally:
        await pipeline.service.stop()


def annotated_secret(password: str) -> dict[str, Any]:
    """The Secret as kapp applies it: its `original` annotation and last-applied hold the whole
    Secret; more annotations, one with a hostile key, repeat the value."""
    applied = secret(password)
    return {
        **applied,
        "metadata": {
            **applied["metadata"],
            "labels": {"app": "shop"},
            "annotations": {
                "kapp.k14s.io/original": json.dumps(applied),
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied),
                "meta.helm.sh/release-name": "shop",
                "example.com/debug": f"password={password}",
                "x\n\u202ekey": base64.b64encode(password.encode()).decode(),
            },
        },
    }


async def test_kapp_and_last_applied_annotations_put_no_value_on_the_log_or_in_git(
    settings: Settings,
    kube: FakeKubeApiServer,
    age_key: AgeKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REVERSER_SECRETS_DIGEST_KEY", DIGEST_KEY)
    remote_path = bare_remote(tmp_path / "remote.git")
    provider = ProviderSettings(name="git", url=str(remote_path), commit_window_s=0, push_cooldown_s=0)
    config = pipeline_settings(settings, kube.kubeconfig(tmp_path), provider, age_key.recipient, free_port())
    kube.namespaces["shop"] = "Active"
    pipeline = await start_pipeline(config, kube, remote_path)
    try:
        await initial_snapshots(pipeline)
        created = kube.put(annotated_secret(PASSWORD_V1))
        await pipeline.audit(audit_event("create", 201, created))
        await pipeline.wait_commits(1)
        document = git(remote_path, "show", f"main:{PATH}").encode()
        decrypted = sops_decrypt(document, age_key, tmp_path)
        assert decrypted["data"] == secret(PASSWORD_V1)["data"]
        assert decrypted["metadata"]["labels"] == {"app": "shop"}
        assert sorted(decrypted["metadata"]["annotations"]) == [
            "meta.helm.sh/release-name",
            "reverser.dev/content-hmac",
        ]
        leaks = forbidden(PASSWORD_V1)
        records = await topic_bytes(pipeline.service.log, config)
        assert records, "the topics were read"
        assert not [leak for leak in leaks for value in records if leak in value]
        objects = git_object_bytes(remote_path)
        assert b"ENC[AES256_GCM" in objects
        assert not [leak for leak in leaks if leak in objects]
        if config.log.effective_backend == "embedded":
            raw = b"".join(p.read_bytes() for p in config.workdir.rglob("*") if p.is_file())
            assert b"sops" in raw, "the segment files were read"
            assert not [leak for leak in leaks if leak in raw]
    finally:
        await pipeline.service.stop()
