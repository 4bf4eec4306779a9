"""`Forbidden` in a rule's status, decided by the real apiserver's RBAC (`make e2e`).

The controller asks the apiserver (SelfSubjectAccessReview, as the identity it runs as) whether it
may list and watch each stream a rule resolves to. Here that identity is a real ServiceAccount
with a real token (TokenRequest) and a Role that grants list and watch on ConfigMaps in one
namespace only; the rule resolution and the status the controller would write are computed with a
client on that token. Nothing is mocked: discovery, the access reviews and RBAC are the
apiserver's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.config import ClusterSettings, Settings
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import GROUP, VERSION, Kind, ObjectRef, parse_object
from pipeline.customresources.status import RuleStreams, object_status, resolve_rules
from pipeline.watch.kube import KubeClient, open_client
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client

pytestmark = pytest.mark.e2e

HOME = "reverser"
TENANT = "team-a"
ACCOUNT = "reverser"
API = f"{GROUP}/{VERSION}"


def _role(name: str, group: str, resource: str) -> client.V1Role:
    return client.V1Role(
        metadata=client.V1ObjectMeta(name=name),
        rules=[client.V1PolicyRule(api_groups=[group], resources=[resource], verbs=["list", "watch"])],
    )


def _binding(role: str) -> client.V1RoleBinding:
    """Binds `role` (same name) to the ServiceAccount."""
    return client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=role),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=role),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=HOME)],
    )


async def _service_account_kubeconfig(plane: ControlPlane, directory: Path) -> Path:
    """A ServiceAccount that may list and watch ConfigMaps in TENANT only; a kubeconfig with its token."""
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        for namespace in (HOME, TENANT):
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        await core.create_namespaced_service_account(
            HOME, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=ACCOUNT))
        )
        await rbac.create_namespaced_role(TENANT, _role("read-configmaps", "", "configmaps"))
        await rbac.create_namespaced_role_binding(TENANT, _binding("read-configmaps"))
        token = await core.create_namespaced_service_account_token(
            ACCOUNT, HOME, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
        )
    kubeconfig = directory / "service-account.kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "plane",
                        "cluster": {"server": plane.server, "certificate-authority": str(plane.pki.ca)},
                    }
                ],
                "users": [{"name": ACCOUNT, "user": {"token": token.status.token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "plane", "user": ACCOUNT}}],
                "current-context": "sa",
            }
        )
    )
    return kubeconfig


def _objects() -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": API,
            "kind": kind,
            "metadata": {"name": name, "namespace": TENANT},
            "spec": spec,
        }

    return [
        obj("GitProvider", "repo", {"url": "https://git.example.com/live.git", "allowedBranches": ["main"]}),
        obj("GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "main", "path": "apps"}),
        obj(
            "WatchRule",
            "apps",
            {
                "targetRef": {"name": "apps"},
                "rules": [
                    {"resources": ["configmaps"]},
                    {"apiGroups": ["apps"], "resources": ["deployments"]},
                ],
            },
        ),
    ]


async def _resolve(kubeconfig: Path) -> tuple[Any, dict[ObjectRef, list[RuleStreams]]]:
    """The rules resolved with a client on the ServiceAccount's token (discovery and access reviews)."""
    settings = Settings(clusters=[ClusterSettings(name="default", kubeconfig=kubeconfig)])
    compiled = compile_resources([parse_object(d) for d in _objects()], home_namespace=HOME, base=settings)
    assert not compiled.errors
    account: KubeClient = await open_client(settings.clusters[0])
    try:

        async def discover(_cluster: str) -> Any:
            return await account.discover()

        return compiled, await resolve_rules(compiled, settings, discover, lambda _cluster: account)
    finally:
        await account.close()


async def test_a_rule_the_service_account_may_not_watch_is_forbidden_until_rbac_allows_it(
    plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = await _service_account_kubeconfig(plane, tmp_path)
    ref = ObjectRef(Kind.WATCH_RULE, TENANT, "apps")
    compiled, resolved = await _resolve(kubeconfig)
    items = {entry.item: entry for entry in resolved[ref]}
    assert items[0].streams == ("v1/configmaps in team-a",)
    assert items[0].problems == ()
    assert items[1].streams == ()
    ((resource, reason, message),) = items[1].problems
    assert (resource, reason) == ("apps/deployments", "Forbidden")
    assert message.startswith("apps/v1/deployments in team-a")
    # the status the controller writes for it
    status = object_status(compiled.reports[ref], resolved[ref])
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions["Ready"] == ("True", "PartiallyResolved")
    rules = {entry["item"]: entry for entry in status["rules"]}
    assert [p["reason"] for p in rules[1]["problems"]] == ["Forbidden"]

    # RBAC decides: with list and watch on Deployments granted, the item resolves to its stream
    async with kube_client(plane.kubeconfig) as api:
        rbac = client.RbacAuthorizationV1Api(api)
        await rbac.create_namespaced_role(TENANT, _role("read-deployments", "apps", "deployments"))
        await rbac.create_namespaced_role_binding(TENANT, _binding("read-deployments"))
    _, resolved = await _resolve(kubeconfig)
    items = {entry.item: entry for entry in resolved[ref]}
    assert items[1].streams == ("apps/v1/deployments in team-a",)
    assert items[1].problems == ()
