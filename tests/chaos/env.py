"""The chaos environment: every real part of a highly available deployment on loopback.

etcd + kube-apiserver (its audit webhook pointed at HAProxy), a three-node KRaft Kafka cluster,
three `reverser run` replicas with leader election on, HAProxy spreading the audit webhook over
them, and a smart-HTTP Git remote (basic auth) that can be told to refuse service.

`CHAOS_WATCH_SHARDS=N` splits the cluster's watch into N shards (`watch_shards`), dealt out over
the replicas, so the leader faults hit one shard's leader and the others go on (docs/chaos.md,
"Sharded watching"); the default, 1, is one watch leader.

`CHAOS_FACTS=admission` runs the managed-cluster shape instead: the apiserver has no audit backend
and calls a validating admission webhook (`failurePolicy: Ignore`, TLS, a path token) through the
same HAProxy and relays, so the faults on the audit path hit the admission path
(docs/chaos.md, "Admission facts instead of audit").
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from pipeline.config import LogSettings
from pipeline.log.kafka import KafkaLog
from tests.chaos.haproxy import HAProxy
from tests.chaos.netcut import Relays
from tests.chaos.workload import FINALIZER_REMOVER, ROBOT, USERS, Target
from tests.commit.httpgit import GitHttpServer
from tests.conftest import unique_prefix
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.cluster.pki import AUDIT_CLIENT_CN
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.webhooks import admission_webhook
from tests.integration.kafka.broker import KafkaCluster
from tests.support.net import free_port

__all__ = [
    "BRANCHES",
    "COMMIT_WINDOW_S",
    "GRACE_MS",
    "LEASE_DURATION_S",
    "ROUTE",
    "ChaosEnv",
    "FactSource",
    "chaos_env",
    "fact_source",
    "seed_remote",
]

ROUTE = "chaos"
REPLICAS = 3
BRANCHES = 6
TARGET_PATH = "clusters/chaos"
COMMIT_WINDOW_S = 3.0
GRACE_MS = 3000
# A batch held by a replica paused until another one takes the lease comes back after the lease
# (8 s) and its detection: audit time may be that far behind newer batches. The hold must also
# cover the apiserver's retry horizon (1 s backoff: about 10 s, docs/deploy.md).
REORDER_MS = 10_000
MAX_WAIT_MS = 20_000
LEASE_DURATION_S = 8.0
LEASE_RENEW_S = 2.0
GIT_USER = "chaos-git"
GIT_PASSWORD = "chaos-git-secret"  # a throwaway credential of the loopback test server
GIT_USER_ENV = "CHAOS_GIT_USER"
GIT_PASSWORD_ENV = "CHAOS_GIT_PASSWORD"
REPO = "remote.git"
BINDING = "chaos-actors"
FACTS_ENV = "CHAOS_FACTS"
SHARDS_ENV = "CHAOS_WATCH_SHARDS"
ADMISSION_TOKEN_ENV = "CHAOS_ADMISSION_TOKEN"
ADMISSION_TOKEN = "chaos-admission-path-token-7d2e"  # a throwaway path token of the loopback webhook


class FactSource(StrEnum):
    """Where the replicas learn who made a change: the audit webhook, or validating admission."""

    AUDIT = "audit"
    ADMISSION = "admission"


def fact_source() -> FactSource:
    """CHAOS_FACTS (default `audit`: the run as it always was)."""
    return FactSource(os.environ.get(FACTS_ENV) or FactSource.AUDIT)


def watch_shards() -> int:
    """CHAOS_WATCH_SHARDS (default 1: one watch leader, the run as it always was)."""
    return int(os.environ.get(SHARDS_ENV) or 1)


@dataclass
class ChaosEnv:
    workdir: Path
    plane: ControlPlane
    kafka: KafkaCluster
    git: GitHttpServer
    haproxy: HAProxy
    # the network path from HAProxy to each replica (audit and health checks), which a fault can cut
    relays: Relays
    replicas: list[ServiceProcess]
    targets: list[Target]
    topic_prefix: str
    facts: FactSource = FactSource.AUDIT

    @property
    def repo(self) -> Path:
        return self.workdir / "git" / REPO

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @asynccontextmanager
    async def log(self) -> AsyncIterator[KafkaLog]:
        """A started client of the run's Kafka cluster, for reading back what the replicas wrote;
        closed on exit."""
        log = KafkaLog(LogSettings(backend="kafka", bootstrap_servers=self.kafka.bootstrap))
        await log.start()
        try:
            yield log
        finally:
            await log.close()

    def metric(self, replica: ServiceProcess, name: str, **labels: str) -> float | None:
        """A replica's metric sum, or None while it does not answer (killed, paused, starting)."""
        if replica.pid is None:
            return None
        try:
            return replica.metric_sum(name, **labels)
        except OSError:
            return None

    def watch_leaders(self) -> list[int]:
        """Indexes of the replicas that report holding the watch lease (with shards: some shard's)."""
        return [i for i, r in enumerate(self.replicas) if (self.metric(r, "reverser_watch_leader") or 0) > 0]

    def shards_led(self, index: int) -> int:
        """How many watch shards replica `index` reports leading (0 while it does not answer)."""
        return int(self.metric(self.replicas[index], "reverser_watch_shards_led") or 0)

    def branch_owners(self) -> dict[str, int]:
        """Branch to the index of the replica whose commit worker owns its partition."""
        owners: dict[str, int] = {}
        for index, replica in enumerate(self.replicas):
            if replica.pid is None:
                continue
            try:
                samples = replica.metric_samples("reverser_commit_owned_branch")
            except OSError:
                continue
            for labels, value in samples:
                if value > 0:
                    owners[labels["branch"]] = index
        return owners


def _replica_config(
    env_dir: Path,
    index: int,
    plane: ControlPlane,
    bootstrap: str,
    prefix: str,
    git_url: str,
    audit_port: int,
    metrics_port: int,
    targets: list[Target],
    facts: FactSource,
) -> dict[str, Any]:
    return {
        "workdir": str(env_dir / f"replica-{index}" / "work"),
        "log": {
            "backend": "kafka",
            "bootstrap_servers": bootstrap,
            "topic_prefix": prefix,
            "client_id": f"reverser-{index}",
            "request_timeout_ms": 10_000,
        },
        "metrics": {"addr": f"127.0.0.1:{metrics_port}"},
        "audit": _ingress_config(plane, audit_port, facts),
        "attribution": {"grace_ms": GRACE_MS, "max_wait_ms": MAX_WAIT_MS, "reorder_ms": REORDER_MS},
        "clusters": [
            {
                "name": ROUTE,
                "kubeconfig": str(plane.kubeconfig),
                "leader_election": True,
                "lease_namespace": "kube-system",
                "lease_duration_s": LEASE_DURATION_S,
                "lease_renew_s": LEASE_RENEW_S,
                **({"watch_shards": watch_shards()} if watch_shards() > 1 else {}),
            }
        ],
        "providers": [
            {
                "name": "git",
                "url": git_url,
                "default_branch": "main",
                "username_env": GIT_USER_ENV,
                "password_env": GIT_PASSWORD_ENV,
                "allow_plain_http_credentials": True,  # loopback test server
                "commit_window_s": COMMIT_WINDOW_S,
                "push_cooldown_s": 0.5,
                "push_max_backoff_s": 5.0,
            }
        ],
        "targets": [
            {
                "name": t.name,
                "provider": "git",
                "branch": t.branch,
                "path": t.path,
                "cluster": ROUTE,
                "rules": [{"resources": ["configmaps", "apps/deployments"], "namespaces": [t.namespace]}],
            }
            for t in targets
        ],
        "lag": {"enabled": True, "poll_interval_s": 2.0},
    }


def _ingress_config(plane: ControlPlane, port: int, facts: FactSource) -> dict[str, Any]:
    """The replica's ingress: the audit webhook's (mutual TLS), or the admission webhook's (TLS and
    the path token: a webhook call carries no client certificate), as tests/e2e does each."""
    if facts is FactSource.ADMISSION:
        return {
            "addr": f"127.0.0.1:{port}",
            "tls": {"cert_file": str(plane.pki.ingress_cert), "key_file": str(plane.pki.ingress_key)},
            "routes": [{"name": ROUTE, "bearer_tokens_env": [ADMISSION_TOKEN_ENV]}],
            "admission": {"enabled": True},
        }
    return {
        "addr": f"127.0.0.1:{port}",
        "tls": {
            "cert_file": str(plane.pki.ingress_cert),
            "key_file": str(plane.pki.ingress_key),
            "client_ca_file": str(plane.pki.ca),
        },
        "routes": [{"name": ROUTE, "allowed_identities": [AUDIT_CLIENT_CN]}],
    }


def seed_remote(repo: Path, branches: list[str], scratch: Path) -> None:
    """A bare remote whose branches start from one commit, as a team's config repository would."""
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(repo)], check=True)
    subprocess.run(["git", "--git-dir", str(repo), "config", "http.receivepack", "true"], check=True)
    work = scratch / "seed"
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main", str(work)], check=True)
    (work / "README.md").write_text("Cluster state, written by the Reverser Pipeline.\n")
    git = ["git", "-C", str(work), "-c", "user.name=seed", "-c", "user.email=seed@example.invalid"]
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "seed"], check=True)
    for branch in ["main", *branches]:
        subprocess.run([*git, "push", "--quiet", str(repo), f"HEAD:refs/heads/{branch}"], check=True)


async def _prepare_cluster(kubeconfig: Path, targets: list[Target], webhook: dict[str, Any] | None) -> None:
    async with kube_client(kubeconfig) as api:
        if webhook is not None:
            # registered before any replica listens: until one does, failurePolicy Ignore lets writes by
            await client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(webhook)
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        for sa in {ROBOT, FINALIZER_REMOVER}:
            namespace, name = sa.split(":")[2:]
            await core.create_namespaced_service_account(
                namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
            )
        subjects = [
            client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=user)
            for user in USERS
        ] + [
            client.RbacV1Subject(kind="ServiceAccount", name=sa.split(":")[3], namespace=sa.split(":")[2])
            for sa in (ROBOT, FINALIZER_REMOVER)
        ]
        await rbac.create_cluster_role_binding(
            client.V1ClusterRoleBinding(
                metadata=client.V1ObjectMeta(name=BINDING),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
                ),
                subjects=subjects,
            )
        )
        for target in targets:
            await core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=target.namespace))
            )


@contextmanager
def chaos_env(workdir: Path, bin_dir: Path, facts: FactSource = FactSource.AUDIT) -> Iterator[ChaosEnv]:
    """Start everything (stopped again in reverse order on exit, whatever happened)."""
    targets = [Target(f"t{i}", f"team-{i}", f"b{i}", TARGET_PATH) for i in range(BRANCHES)]
    os.environ[GIT_USER_ENV] = GIT_USER
    os.environ[GIT_PASSWORD_ENV] = GIT_PASSWORD
    with ExitStack() as stack:
        audit_port = free_port()
        webhook = None
        if facts is FactSource.ADMISSION:
            os.environ[ADMISSION_TOKEN_ENV] = ADMISSION_TOKEN
            plane = ControlPlane(workdir / "plane", bin_dir)  # no audit backend
            url = f"https://127.0.0.1:{audit_port}/admission-webhook/{ROUTE}/{ADMISSION_TOKEN}"
            webhook = admission_webhook(url, plane.pki.ca.read_bytes())
        else:
            plane = ControlPlane(
                workdir / "plane", bin_dir, f"https://127.0.0.1:{audit_port}/audit-webhook/{ROUTE}"
            )
        stack.callback(plane.stop)
        plane.start()
        asyncio.run(_prepare_cluster(plane.kubeconfig, targets, webhook))

        kafka = KafkaCluster(workdir / "kafka", 3)
        stack.callback(kafka.stop)
        kafka.start()

        (workdir / "git").mkdir()
        seed_remote(workdir / "git" / REPO, [t.branch for t in targets], workdir)
        git = stack.enter_context(GitHttpServer(workdir / "git", GIT_USER, GIT_PASSWORD))
        git_url = f"{git.base_url}/{REPO}"

        prefix = unique_prefix()
        ports = [(free_port(), free_port()) for _ in range(REPLICAS)]
        replicas = []
        for index, (audit, metrics) in enumerate(ports):
            replica_dir = workdir / f"replica-{index}"
            replica_dir.mkdir()
            config = _replica_config(
                workdir, index, plane, kafka.bootstrap, prefix, git_url, audit, metrics, targets, facts
            )
            # INFO: three replicas' DEBUG logs (every Kafka request) cost a core on their own.
            replicas.append(ServiceProcess(replica_dir, config, log_level="INFO"))
        relays = Relays(ports)
        stack.callback(relays.stop)
        relays.start()
        (workdir / "haproxy").mkdir()
        haproxy = HAProxy(workdir / "haproxy", audit_port, [path.ports for path in relays.paths])
        stack.callback(haproxy.stop)
        haproxy.start()
        for replica in replicas:
            stack.callback(replica.stop)
            replica.start()
        yield ChaosEnv(workdir, plane, kafka, git, haproxy, relays, replicas, targets, prefix, facts)
