"""`Forbidden` in a rule's status, decided by the real apiserver's RBAC (`make e2e`).

The controller asks the apiserver (SelfSubjectAccessReview, as the identity it runs as) whether it
may list and watch each stream a rule resolves to. Here that identity is a real ServiceAccount
with a real token (TokenRequest) and a Role that grants list and watch on ConfigMaps in one
namespace only; the rule resolution and the status the controller would write are computed with a
client on that token. Nothing is mocked: discovery, the access reviews and RBAC are the
apiserver's own.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.config import ClusterSettings, Settings
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import GROUP, VERSION, Kind, ObjectRef, parse_object
from pipeline.customresources.status import RuleStreams, object_status, resolve_rules
from pipeline.gitcredentials import (
    CredentialsError,
    CredentialsReason,
    credentials_from_secret,
    known_hosts_from,
)
from pipeline.kube.client import KubeClient, open_client
from pipeline.service.objects import ClusterObjects
from tests.deploy.helm import helm_path
from tests.deploy.helm import render as render_chart
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

HOME = "reverser"
TENANT = "team-a"
ACCOUNT = "reverser"


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
    return await _token_kubeconfig(plane, HOME, ACCOUNT, directory / "service-account.kubeconfig")


async def _token_kubeconfig(plane: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a token from TokenRequest."""
    async with kube_client(plane.kubeconfig) as api:
        token = await client.CoreV1Api(api).create_namespaced_service_account_token(
            account,
            namespace,
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
        )
    text = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "plane",
                    "cluster": {"server": plane.server, "certificate-authority": str(plane.pki.ca)},
                }
            ],
            "users": [{"name": account, "user": {"token": token.status.token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "plane", "user": account}}],
            "current-context": "sa",
        }
    )
    await asyncio.to_thread(path.write_text, text)
    return path


def _objects() -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, TENANT, spec)

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
    settings = Settings(
        clusters=[ClusterSettings(name="default", kubeconfig=kubeconfig)],
        custom_resources={
            "tenants": [
                {"namespaces": [TENANT], "url_prefixes": ["https://git.example.com/"], "path_prefixes": ["."]}
            ]
        },
    )
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


# The whole service under the chart's RBAC ------------------------------------------------------

RELEASE = "chart"  # the release namespace: the chart's ServiceAccount, Leases, controller namespace
CHART_TENANT = "team-b"


_CHART_ACCOUNTS: dict[str, str] = {}  # control plane server -> the chart's ServiceAccount there


async def _apply_chart_rbac(plane: ControlPlane) -> str:
    """The chart's ServiceAccount and RBAC (custom resources on, leader election) as `helm template`
    renders them, created on the apiserver once per control plane; returns the ServiceAccount's name."""
    if plane.server not in _CHART_ACCOUNTS:
        _CHART_ACCOUNTS[plane.server] = await _create_chart_rbac(plane)
    return _CHART_ACCOUNTS[plane.server]


async def _create_chart_rbac(plane: ControlPlane) -> str:
    helm = helm_path()
    assert helm is not None, "helm is not built: tests/deploy/build-helm.sh (make e2e runs it first)"
    objects = render_chart(
        helm,
        RELEASE,
        "--set-json",
        'config.clusters=[{"name":"default","in_cluster":true,"leader_election":true}]',
        "--set-json",
        'config.custom_resources={"enabled":true}',
        "--set-json",
        f'rbac.gitCredentials={{"namespaces":["{CHART_TENANT}"]}}',
    )
    account = ""
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        for namespace in (RELEASE, CHART_TENANT):
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        for obj in objects:
            kind = obj["kind"]
            if kind == "ServiceAccount":
                account = obj["metadata"]["name"]
                await core.create_namespaced_service_account(RELEASE, obj)
            elif kind == "ClusterRole":
                await rbac.create_cluster_role(obj)
            elif kind == "ClusterRoleBinding":
                await rbac.create_cluster_role_binding(obj)
            elif kind == "Role":
                await rbac.create_namespaced_role(obj["metadata"].get("namespace", RELEASE), obj)
            elif kind == "RoleBinding":
                await rbac.create_namespaced_role_binding(obj["metadata"].get("namespace", RELEASE), obj)
        # what the operator grants for the rules: ConfigMaps in the tenant and the release
        # namespace, not Deployments (the chart grants get on Secrets in the tenant's only)
        for namespace in (CHART_TENANT, RELEASE):
            await rbac.create_namespaced_role(namespace, _role("read-configmaps", "", "configmaps"))
            binding = _binding("read-configmaps")
            binding.subjects[0].name, binding.subjects[0].namespace = account, RELEASE
            await rbac.create_namespaced_role_binding(namespace, binding)
    assert account
    return account


LOCKED_SECRET = {"username": "locked-user", "password": "locked-pa55-e2e"}


def _locked_objects(url: str) -> list[dict[str, Any]]:
    """A provider in the release namespace whose Secret the chart's account may not get, its target,
    and a rule on the release namespace's ConfigMaps (which the account may watch)."""
    return [
        custom_object(
            "GitProvider",
            "locked",
            RELEASE,
            {
                "url": url,
                "allowedBranches": ["main"],
                "secretRef": {"name": "locked-creds"},
                "pipeline": {"push_cooldown_s": 0.2, "push_max_backoff_s": 1},
            },
        ),
        custom_object(
            "GitTarget",
            "locked",
            RELEASE,
            {"providerRef": {"name": "locked"}, "branch": "main", "path": "locked"},
        ),
        custom_object(
            "WatchRule",
            "locked",
            RELEASE,
            {"targetRef": {"name": "locked"}, "rules": [{"resources": ["configmaps"]}]},
        ),
    ]


async def test_the_service_under_the_charts_rbac_reports_forbidden_in_the_rules_status(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """`reverser run` as the chart's ServiceAccount: the controller (Lease, watches, status patches)
    and the watch stage work with the chart's RBAC, the granted ConfigMaps reach Git, and the
    WatchRule's Deployments item shows `Forbidden` in its status. A GitProvider whose Secret the
    account may not `get` (the release namespace's: the chart grants the tenant's only) shows
    `Ready=False` `CredentialsUnavailable` saying forbidden and naming the Secret, never a value,
    and nothing of its target reaches its remote."""
    account = await _apply_chart_rbac(plane)
    kubeconfig = await _token_kubeconfig(plane, RELEASE, account, tmp_path / "chart-account.kubeconfig")
    remote, locked_remote = GitRemote(tmp_path / "remote.git"), GitRemote(tmp_path / "locked.git")
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        for document in _objects():
            document["metadata"]["namespace"] = CHART_TENANT
            if document["kind"] == "GitProvider":
                document["spec"].update({"url": remote.url, "pipeline": {"push_cooldown_s": 0.2}})
            await create(api, document)
        await client.CoreV1Api(api).create_namespaced_secret(
            RELEASE,
            client.V1Secret(metadata=client.V1ObjectMeta(name="locked-creds"), string_data=LOCKED_SECRET),
        )
        for document in _locked_objects(locked_remote.url):
            await create(api, document)
    config = service_config(
        tmp_path / "service", kubeconfig, lease_namespace=RELEASE, leader_election=True, lease_duration_s=3
    )
    config["custom_resources"]["namespace"] = RELEASE
    service = ServiceProcess(tmp_path, config)
    service.start()
    try:

        async def status() -> dict[str, Any]:
            async with kube_client(plane.kubeconfig) as api:
                rule = await client.CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, VERSION, CHART_TENANT, Kind.WATCH_RULE.plural, "apps"
                )
            found: dict[str, Any] = rule.get("status") or {}
            return found

        async def reported() -> bool:
            conditions = {c["type"]: c["reason"] for c in (await status()).get("conditions", [])}
            return conditions.get("Reconciling") == "StreamsRunning"

        await wait_for(reported, "the WatchRule's status with its running stream", timeout_s=90)
        rules = {entry["item"]: entry for entry in (await status())["rules"]}
        assert rules[0]["streams"] == ["v1/configmaps in team-b"]
        assert [p["reason"] for p in rules[1]["problems"]] == ["Forbidden"]
        assert rules[1]["problems"][0]["message"] == "apps/v1/deployments in team-b: list is not allowed"

        async with kube_client(plane.kubeconfig) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(
                CHART_TENANT,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name="granted"), data={"a": "b"}),
            )
        remote.wait_for(
            lambda r: "apps/team-b/configmaps/granted.yaml" in r.files(), 90, "the granted ConfigMap in Git"
        )

        # the locked provider's target gets a change: its commit worker is refused the Secret
        async with kube_client(plane.kubeconfig) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(
                RELEASE,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name="for-locked"), data={"a": "b"}),
            )

        async def provider_ready() -> dict[str, Any]:
            async with kube_client(plane.kubeconfig) as api:
                provider = await client.CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, VERSION, RELEASE, Kind.GIT_PROVIDER.plural, "locked"
                )
            conditions = (provider.get("status") or {}).get("conditions", [])
            found: dict[str, Any] = next((c for c in conditions if c["type"] == "Ready"), {})
            return found

        async def refused() -> bool:
            return (await provider_ready()).get("reason") == "CredentialsUnavailable"

        await wait_for(refused, "the locked GitProvider's Ready=False CredentialsUnavailable", timeout_s=90)
        ready = await provider_ready()
        assert ready["status"] == "False"
        assert ready["message"] == (
            "Secret chart/locked-creds: reading it is forbidden (the service account needs get on "
            "secrets in namespace chart)"
        )
        assert locked_remote.files() == {}, "nothing is pushed without credentials"
    finally:
        assert service.stop() == 0, service.log_tail()
    log = service.log_path.read_text(errors="replace")
    assert "Secret chart/locked-creds: reading it is forbidden" in log
    assert [v for v in LOCKED_SECRET.values() if v in log] == []


async def test_git_credentials_are_read_with_get_only_under_the_charts_rbac(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """The commit worker's reader (`ClusterObjects`) as the chart's ServiceAccount: it gets the
    Secret and ConfigMap of a namespace the chart grants (`rbac.gitCredentials.namespaces`), a
    missing Secret is `not_found`, one of another namespace `forbidden` (named, never shown), and
    the account cannot list the Secrets it may get."""
    account = await _apply_chart_rbac(plane)
    kubeconfig = await _token_kubeconfig(plane, RELEASE, account, tmp_path / "credentials.kubeconfig")
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_secret(
            CHART_TENANT,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="git-creds"),
                string_data={"username": "git-user", "password": "pa55-e2e"},
            ),
        )
        await core.create_namespaced_secret(
            RELEASE,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="elsewhere"), string_data={"password": "other-pa55"}
            ),
        )
        await core.create_namespaced_config_map(
            CHART_TENANT,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="git-hosts"),
                data={"ssh_known_hosts": "git.example ssh-ed25519 AAAA"},
                binary_data={"extra": base64.b64encode(b"\x00bin").decode()},
            ),
        )
    objects = ClusterObjects(Settings.model_validate(service_config(tmp_path / "s", kubeconfig)))
    try:
        found = credentials_from_secret(
            "team-b/git-creds", await objects.read("Secret", CHART_TENANT, "git-creds")
        )
        assert (found.method, found.username, found.password) == ("basic", "git-user", "pa55-e2e")
        hosts = await objects.read("ConfigMap", CHART_TENANT, "git-hosts")
        assert known_hosts_from("ConfigMap team-b/git-hosts", hosts) == "git.example ssh-ed25519 AAAA"
        assert hosts["extra"] == b"\x00bin"
        with pytest.raises(CredentialsError, match="Secret team-b/missing does not exist") as missing:
            await objects.read("Secret", CHART_TENANT, "missing")
        assert missing.value.reason is CredentialsReason.NOT_FOUND
        with pytest.raises(CredentialsError, match="get on secrets in namespace chart") as forbidden:
            await objects.read("Secret", RELEASE, "elsewhere")
        assert forbidden.value.reason is CredentialsReason.FORBIDDEN
        assert "other-pa55" not in str(forbidden.value)
    finally:
        await objects.close()
    async with kube_client(kubeconfig) as api:
        with pytest.raises(client.ApiException) as listing:
            await client.CoreV1Api(api).list_namespaced_secret(CHART_TENANT)
    assert listing.value.status == 403
