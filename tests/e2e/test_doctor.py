"""`reverser doctor` cluster checks against a real kube-apiserver (RBAC authorizer): the admin passes,
a service account with an RBAC gap fails with the Role to grant, an unreachable apiserver fails.

The restricted identity is a real ServiceAccount token from the TokenRequest API, bound to a Role
that allows `list` but not `watch` of configmaps in one namespace and nothing on Leases.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from pipeline.config import Settings
from pipeline.doctor.cluster_checks import check_clusters
from pipeline.doctor.report import Check, Status
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client
from tests.support.net import free_port

pytestmark = pytest.mark.e2e

NAMESPACE = "shop"
ACCOUNT = "doctor-restricted"


def token_kubeconfig(server: str, ca: Path, token: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": "default", "context": {"cluster": "c", "user": ACCOUNT}}],
            "current-context": "default",
        }
    )


async def restricted_token(admin: Path) -> str:
    """A ServiceAccount that may list but not watch configmaps in NAMESPACE, and its token."""
    async with kube_client(admin) as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        await core.create_namespaced_service_account(
            NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=ACCOUNT))
        )
        await rbac.create_namespaced_role(
            NAMESPACE,
            client.V1Role(
                metadata=client.V1ObjectMeta(name=ACCOUNT),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])],
            ),
        )
        await rbac.create_namespaced_role_binding(
            NAMESPACE,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=ACCOUNT),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=ACCOUNT),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=NAMESPACE)],
            ),
        )
        answer = await core.create_namespaced_service_account_token(
            ACCOUNT,
            NAMESPACE,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
            ),
        )
        token: str = answer.status.token
        return token


def settings_for(tmp_path: Path, kubeconfig: Path, shards: int = 1) -> Settings:
    return Settings.model_validate(
        {
            "workdir": str(tmp_path / "work"),
            "clusters": [
                {
                    "name": "c",
                    "kubeconfig": str(kubeconfig),
                    "leader_election": True,
                    "lease_namespace": NAMESPACE,
                    "watch_shards": shards,
                }
            ],
            "providers": [{"name": "git", "url": str(tmp_path / "remote.git")}],
            "targets": [
                {
                    "name": "t",
                    "provider": "git",
                    "cluster": "c",
                    "rules": [{"resources": ["configmaps"], "namespaces": [NAMESPACE]}],
                }
            ],
        }
    )


def by_check(checks: list[Check]) -> dict[str, Check]:
    return {c.check: c for c in checks}


def test_admin_passes_and_an_rbac_gap_fails_with_the_role_to_grant(
    plane: ControlPlane, tmp_path: Path
) -> None:
    admin = by_check(asyncio.run(check_clusters(settings_for(tmp_path, plane.kubeconfig))))
    assert admin["apiserver reachable"].status is Status.OK
    assert admin[f"may watch configmaps@{NAMESPACE}"].status is Status.OK
    assert admin[f"may hold lease {NAMESPACE}/reverser-watch-c"].status is Status.OK

    token = asyncio.run(restricted_token(plane.kubeconfig))
    restricted = tmp_path / "restricted.kubeconfig"
    restricted.write_text(token_kubeconfig(plane.server, plane.pki.ca, token))
    checks = by_check(asyncio.run(check_clusters(settings_for(tmp_path, restricted))))
    assert checks["apiserver reachable"].status is Status.OK
    stream = checks[f"may watch configmaps@{NAMESPACE}"]
    assert stream.status is Status.FAIL
    assert stream.detail.startswith("denied: watch")
    assert "list" not in stream.detail.split("(")[0], "list is granted, only watch is missing"
    assert f"a Role in namespace {NAMESPACE}" in stream.fix
    lease = checks[f"may hold lease {NAMESPACE}/reverser-watch-c"]
    assert lease.status is Status.FAIL
    assert lease.detail == "denied: get, create, update"
    sharded = by_check(asyncio.run(check_clusters(settings_for(tmp_path, restricted, shards=2))))
    roster = sharded[f"may hold lease {NAMESPACE}/reverser-watch-c"]
    assert roster.detail == "denied: get, create, update, list, delete"
    assert "grant get, create, update, list, delete" in roster.fix


def test_an_unreachable_apiserver_fails_reachability(plane: ControlPlane, tmp_path: Path) -> None:
    config = json.loads(plane.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(json.dumps(config))
    checks = by_check(asyncio.run(check_clusters(settings_for(tmp_path, dead))))
    assert checks["apiserver reachable"].status is Status.FAIL
    assert "server address" in checks["apiserver reachable"].fix
