"""End to end: a person's Secret reaches Git only SOPS-encrypted, signed, pushed over SSH.

Real parts: etcd + kube-apiserver posting audit batches over mutual TLS, the Kafka broker,
`reverser run` in its own process, Debian's sshd with a bare repository behind it (strict host-key
checking), SSH commit signing, the `sops` binary and an age key generated here. alice acts through
impersonation; the test reads the pushed history, decrypts it with `sops`, verifies every commit
with `git verify-commit`, and scans every record of every topic for the Secret's value.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.config import load_settings
from pipeline.log import open_log
from pipeline.log.topics import TopicNames
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import ALICE, grant_cluster_admin, kube_client
from tests.e2e.service_process import ServiceProcess, serving
from tests.e2e.test_pipeline import ROUTE, TARGET_PATH
from tests.e2e.test_pipeline import _service_config as pipeline_config
from tests.secrets.keys import DIGEST_KEY, AgeKey, sops_decrypt
from tests.support.gitsign import COMMITTER, keygen, verify_all
from tests.support.logread import read_topic
from tests.support.sshd import SshServer, running_sshd

pytestmark = pytest.mark.e2e

NAMESPACE = "vault"
SECRET_PATH = f"{TARGET_PATH}/{NAMESPACE}/secrets/db.sops.yaml"
DIGEST_ENV = "E2E_SECRETS_DIGEST_KEY"  # not REVERSER_*: the service process drops those
PASSWORDS = ("e2e-first-password-0451", "e2e-second-password-9137")
WAIT_S = 90.0
STREAMS = 2  # secrets and configmaps in one namespace


@dataclass(frozen=True, slots=True)
class Env:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess
    age_key: AgeKey
    signing_key: Path
    config_path: Path


@pytest.fixture(scope="module")
def env(
    controlplane_bin_dir: Path,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
    audit_port: int,
) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("secrets-e2e")
    age_key = AgeKey.generate()
    signing_key = keygen(workdir / "signing")
    plane = ControlPlane(
        workdir / "plane", controlplane_bin_dir, f"https://127.0.0.1:{audit_port}/audit-webhook/{ROUTE}"
    )
    previous = os.environ.get(DIGEST_ENV)
    os.environ[DIGEST_ENV] = DIGEST_KEY
    plane.start()
    try:
        with running_sshd(workdir / "sshd") as sshd:
            remote = GitRemote(sshd.root / "remote.git")
            asyncio.run(_prepare_cluster(plane.kubeconfig))
            config = _service_config(
                workdir, plane, sshd, remote, age_key, signing_key, kafka_bootstrap, audit_port
            )
            with serving(workdir, config, snapshot_streams=STREAMS, timeout_s=WAIT_S) as service:
                yield Env(plane, remote, service, age_key, signing_key, service.config_path)
    finally:
        plane.stop()
        if previous is None:
            os.environ.pop(DIGEST_ENV, None)
        else:
            os.environ[DIGEST_ENV] = previous


def _service_config(
    workdir: Path,
    plane: ControlPlane,
    sshd: SshServer,
    remote: GitRemote,
    age_key: AgeKey,
    signing_key: Path,
    bootstrap: str,
    audit_port: int,
) -> dict[str, Any]:
    """The pipeline e2e configuration with an SSH provider that signs, and a target that encrypts."""
    config = pipeline_config(workdir, plane, remote, bootstrap, audit_port)
    config["providers"] = [
        {
            "name": "ssh-remote",
            "url": sshd.scp_url(remote.path),
            "default_branch": "main",
            "commit_window_s": 0,
            "push_cooldown_s": 0.5,
            "committer": {"name": COMMITTER.name, "email": COMMITTER.email},
            "ssh": {"private_key_file": str(sshd.client_key), "known_hosts_file": str(sshd.known_hosts())},
            "signing": {"format": "ssh", "key_file": str(signing_key)},
        }
    ]
    (target,) = config["targets"]
    target["provider"] = "ssh-remote"
    target["rules"] = [{"resources": ["secrets", "configmaps"], "namespaces": [NAMESPACE]}]
    target["encryption"] = {"age_recipients": [age_key.recipient], "digest_key_env": DIGEST_ENV}
    return config


async def _prepare_cluster(kubeconfig: Path) -> None:
    await grant_cluster_admin(kubeconfig)
    async with kube_client(kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )


def secret(password: str) -> client.V1Secret:
    return client.V1Secret(
        metadata=client.V1ObjectMeta(name="db"),
        type="Opaque",
        data={"password": base64.b64encode(password.encode()).decode()},
    )


async def wait_until(env: Env, what: str, predicate: Any) -> None:
    await asyncio.to_thread(env.remote.wait_for, predicate, WAIT_S, what)


async def test_alice_creates_changes_and_deletes_a_secret(env: Env, tmp_path: Path) -> None:
    seen: list[bytes] = []

    def holds(password: str) -> Any:
        def check(remote: GitRemote) -> bool:
            content = remote.files().get(SECRET_PATH)
            if content is None or (seen and content.encode() == seen[-1]):
                return False
            data = sops_decrypt(content.encode(), env.age_key, tmp_path)["data"]
            if base64.b64decode(data["password"]).decode() != password:
                return False
            seen.append(content.encode())
            return True

        return check

    async with kube_client(env.plane.kubeconfig, ALICE) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_secret(NAMESPACE, secret(PASSWORDS[0]))
        await wait_until(env, "the encrypted secret", holds(PASSWORDS[0]))
        await core.replace_namespaced_secret("db", NAMESPACE, secret(PASSWORDS[1]))
        await wait_until(env, "the changed secret", holds(PASSWORDS[1]))
        await core.delete_namespaced_secret("db", NAMESPACE)
        await wait_until(env, "the secret's removal", lambda remote: SECRET_PATH not in remote.files())

    commits = [c for c in env.remote.commits() if any(path == SECRET_PATH for _, path in c.changes)]
    assert [(c.author_name, c.subject) for c in commits] == [
        (ALICE, "[CREATE] v1/secrets/db"),
        (ALICE, "[UPDATE] v1/secrets/db"),
        (ALICE, "[DELETE] v1/secrets/db"),
    ]
    allowed = tmp_path / "allowed_signers"
    public_key = env.signing_key.with_suffix(".pub").read_text(encoding="ascii")
    allowed.write_text(f"{COMMITTER.email} {public_key}", encoding="ascii")
    signed = verify_all(
        env.remote.path, None, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}"
    )
    assert set(signed) == {f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"}
    for content in seen:
        assert b"ENC[AES256_GCM" in content
        for password in PASSWORDS:
            assert password.encode() not in content

    settings = load_settings(env.config_path, {})
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    log = open_log(settings)
    await log.start()
    try:
        values: list[bytes] = []
        for topic in (names.audit_facts, names.watch_events, names.watch_cursors, names.branch_work):
            for record in await read_topic(log, topic):
                values.extend([record.key or b"", record.value or b""])
                values.extend(value for _, value in record.headers)
    finally:
        await log.close()
    assert any(b"sops" in value for value in values), "the sealed events were read"
    leaks = [p.encode() for p in PASSWORDS] + [base64.b64encode(p.encode()) for p in PASSWORDS]
    assert not [leak for leak in leaks for value in values if leak in value]
