"""Kubernetes clients for the end-to-end tests: the admin, and users acting through impersonation.

The admin certificate is in `system:masters`, which may impersonate anyone; every test action is
sent as the person it is credited to (`Impersonate-User`), exactly as a kubectl `--as` would, so
the audit events carry `impersonatedUser` and the pipeline must credit that user.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from kubernetes_asyncio import client, config

__all__ = ["ALICE", "BOB", "CAROL", "FINALIZER_SA", "FINALIZER_SA_NAME", "grant_cluster_admin", "kube_client"]

ALICE = "alice"
BOB = "bob"
CAROL = "carol"
FINALIZER_SA_NAMESPACE = "kube-system"
FINALIZER_SA_NAME = "finalizer-remover"
FINALIZER_SA = f"system:serviceaccount:{FINALIZER_SA_NAMESPACE}:{FINALIZER_SA_NAME}"
BINDING_NAME = "reverser-e2e-actors"


@asynccontextmanager
async def kube_client(kubeconfig: Path, as_user: str | None = None) -> AsyncIterator[client.ApiClient]:
    """An ApiClient on the admin kubeconfig, impersonating `as_user` when given."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    api = client.ApiClient(configuration=configuration)
    if as_user is not None:
        api.set_default_header("Impersonate-User", as_user)
    try:
        yield api
    finally:
        await api.close()


async def grant_cluster_admin(kubeconfig: Path) -> None:
    """Bind alice, bob, carol and the finalizer service account to `cluster-admin` (idempotent)."""
    async with kube_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        sa_names = {
            sa.metadata.name
            for sa in (await core.list_namespaced_service_account(FINALIZER_SA_NAMESPACE)).items
        }
        if FINALIZER_SA_NAME not in sa_names:
            await core.create_namespaced_service_account(
                FINALIZER_SA_NAMESPACE,
                client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=FINALIZER_SA_NAME)),
            )
        bindings = {b.metadata.name for b in (await rbac.list_cluster_role_binding()).items}
        if BINDING_NAME in bindings:
            return
        await rbac.create_cluster_role_binding(
            client.V1ClusterRoleBinding(
                metadata=client.V1ObjectMeta(name=BINDING_NAME),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
                ),
                subjects=[
                    client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=ALICE),
                    client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=BOB),
                    client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=CAROL),
                    client.RbacV1Subject(
                        kind="ServiceAccount", name=FINALIZER_SA_NAME, namespace=FINALIZER_SA_NAMESPACE
                    ),
                ],
            )
        )
