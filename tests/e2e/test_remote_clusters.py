"""Remote clusters from kubeconfig Secrets on a real kube-apiserver (`make e2e`).

A cluster whose kubeconfig is a Secret (`clusters[].kubeconfig_secret`, what a ClusterProvider's
`spec.kubeConfig.secretRef` becomes) is read through the API server and watched; one whose
Secret is missing, then unsafe, stalls alone with a problem naming the Secret, never a value, and
heals once the Secret is fixed. The "remote" cluster is the same kube-apiserver reached through the
Secret: what is tested is the path from the Secret to a working client. The CRD keeps
`spec.kubeConfig` immutable as gitops-reverser's does.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from pipeline.config import ClusterSettings, KubeconfigSecretReference, Settings
from pipeline.customresources.objects import GROUP, VERSION, Kind
from pipeline.kube.client import KubeError, open_client, open_client_from_dict
from pipeline.kube.kubeconfigsecret import with_kubeconfig_secrets
from pipeline.log import open_log
from pipeline.log.topics import topic_specs
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client
from tests.e2e.test_custom_resources import create, custom_object, install_crds
from tests.support.wait import wait_for
from tests.watch.conftest import (
    fast_options,
    kinds,
    make_component,
    rule,
    target,
    wait_for_events,
    with_targets,
)

pytestmark = pytest.mark.e2e

HOME = "reverser"
SOURCE = "remote-e2e"


def inline_kubeconfig(kubeconfig: Path) -> dict[str, Any]:
    """The plane's admin kubeconfig with its files inlined (`*-data`), as a Secret must carry it."""
    config: dict[str, Any] = json.loads(kubeconfig.read_text(encoding="utf-8"))

    def data(path: str) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode()

    for entry in config["clusters"]:
        entry["cluster"]["certificate-authority-data"] = data(entry["cluster"].pop("certificate-authority"))
    for entry in config["users"]:
        user = entry["user"]
        user["client-certificate-data"] = data(user.pop("client-certificate"))
        user["client-key-data"] = data(user.pop("client-key"))
    return config


def _secret(name: str, key: str, kubeconfig: dict[str, Any]) -> client.V1Secret:
    body = base64.b64encode(json.dumps(kubeconfig).encode()).decode()
    return client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=HOME), data={key: body})


async def _namespaces(api: client.ApiClient, *names: str) -> None:
    core = client.CoreV1Api(api)
    for name in names:
        try:
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except ApiException as exc:
            if exc.status != 409:
                raise


async def test_a_secrets_kubeconfig_opens_a_throttled_client(plane: ControlPlane) -> None:
    holder = ClusterSettings(name="home", kubeconfig=plane.kubeconfig)
    async with kube_client(plane.kubeconfig) as api:
        await _namespaces(api, HOME)
        await client.CoreV1Api(api).create_namespaced_secret(
            HOME, _secret("direct", "config", inline_kubeconfig(plane.kubeconfig))
        )
    ref = KubeconfigSecretReference(namespace=HOME, name="direct", key="config")
    factory = with_kubeconfig_secrets(open_client, holder)
    remote = await factory(ClusterSettings(name="remote", kubeconfig_secret=ref, qps=50, burst=5))
    try:
        assert remote.throttle is not None
        assert remote.throttle.bucket.burst == 5
        assert ("", "configmaps") in await remote.discover()
    finally:
        await remote.close()


async def test_a_broken_secret_stalls_only_its_cluster_and_heals_when_fixed(
    plane: ControlPlane, tmp_path: Path
) -> None:
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        await _namespaces(api, HOME, SOURCE)
        await core.create_namespaced_secret(
            HOME, _secret("good-kubeconfig", "value", inline_kubeconfig(plane.kubeconfig))
        )
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="cm-a", namespace=SOURCE), data={"v": "1"}
        )
        await core.create_namespaced_config_map(SOURCE, body)
        base = with_targets(
            Settings(workdir=tmp_path / "work"),
            plane.kubeconfig,
            target("t-good", rule("configmaps", namespaces=(SOURCE,)), cluster="good"),
            target("t-broken", rule("configmaps", namespaces=(SOURCE,)), cluster="broken"),
        )
        secret = {"namespace": HOME, "name": "good-kubeconfig"}
        config = base.model_copy(
            update={
                "clusters": [
                    *base.clusters,
                    ClusterSettings(name="good", kubeconfig_secret=secret, qps=20),
                    ClusterSettings(name="broken", kubeconfig_secret={**secret, "name": "broken-kubeconfig"}),
                ]
            }
        )
        log = open_log(config)
        await log.start()
        try:
            await log.create_topics(topic_specs(config))
            component = make_component(config, log, fast_options(config))
            await component.start()
            try:
                manager = component.manager
                streams = [s for s in manager.streams.values() if s.spec.stream.target == "t-good"]
                await wait_for(lambda: streams[0].state == "Streaming", what="t-good streaming", timeout_s=60)
                await wait_for_events(
                    log, config, lambda evs: "end" in kinds(evs, "t-good"), "t-good snapshot"
                )
                (problem,) = [p for p in manager.problems if p.target == "t-broken"]
                assert problem.reason == "ClusterConfigError"
                assert "Secret reverser/broken-kubeconfig does not exist" in problem.message

                unsafe = inline_kubeconfig(plane.kubeconfig)
                unsafe["users"][0]["user"] = {"exec": {"command": "/bin/true", "apiVersion": "v1"}}
                await core.create_namespaced_secret(HOME, _secret("broken-kubeconfig", "value", unsafe))
                await component.apply(config)
                (problem,) = [p for p in manager.problems if p.target == "t-broken"]
                assert (
                    "Secret reverser/broken-kubeconfig key value: user 'admin' sets exec" in problem.message
                )
                assert "t-broken" not in {s.spec.stream.target for s in manager.streams.values()}

                await core.replace_namespaced_secret(
                    "broken-kubeconfig",
                    HOME,
                    _secret("broken-kubeconfig", "value", inline_kubeconfig(plane.kubeconfig)),
                )
                await component.apply(config)
                assert [p for p in manager.problems if p.target == "t-broken"] == []
                await wait_for_events(
                    log, config, lambda evs: "end" in kinds(evs, "t-broken"), "t-broken snapshot once healed"
                )
            finally:
                await component.stop()
        finally:
            await log.close()


async def test_the_crd_keeps_kubeconfig_immutable(plane: ControlPlane) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        spec = {"kubeConfig": {"secretRef": {"name": "one"}}, "qps": 5, "attribution": {"auditRoute": "prod"}}
        await create(api, custom_object("ClusterProvider", "immutable", "", spec))
        custom = client.CustomObjectsApi(api)

        async def patch(*operations: dict[str, Any]) -> None:
            await custom.patch_cluster_custom_object(
                GROUP, VERSION, Kind.CLUSTER_PROVIDER.plural, "immutable", list(operations)
            )

        await patch({"op": "replace", "path": "/spec/qps", "value": 7})  # other fields change freely
        for change in (
            {"op": "replace", "path": "/spec/kubeConfig/secretRef/name", "value": "two"},
            {"op": "remove", "path": "/spec/kubeConfig"},
        ):
            with pytest.raises(ApiException) as refused:
                await patch(change)
            assert refused.value.status == 422
            assert "spec.kubeConfig is immutable" in str(refused.value.body)
        with pytest.raises(ApiException) as refused:
            await create(
                api,
                custom_object("ClusterProvider", "bad-route", "", {"attribution": {"auditRoute": "Prod_EU"}}),
            )
        assert refused.value.status == 422
        assert "auditRoute" in str(refused.value.body)


ROTATING = "rotate-e2e"


def _token_config(plane: ControlPlane, token: str) -> dict[str, Any]:
    """A kubeconfig for the plane that authenticates with a ServiceAccount token, all inline."""
    ca = base64.b64encode(Path(plane.pki.ca).read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "plane", "cluster": {"server": plane.server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": "mirror", "user": {"token": token}}],
        "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "mirror"}}],
        "current-context": "plane",
    }


async def _mirror_account(api: client.ApiClient, name: str) -> str:
    """A ServiceAccount of HOME bound to cluster-admin, and a token of it (TokenRequest)."""
    core = client.CoreV1Api(api)
    await core.create_namespaced_service_account(
        HOME, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    await client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=f"e2e-{name}"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=HOME)],
        )
    )
    answer = await core.create_namespaced_service_account_token(
        name, HOME, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    )
    return str(answer.status.token)


async def test_a_token_rotated_in_the_secret_heals_the_cluster_in_place(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """The Secret gets a new ServiceAccount's token, then the old account is deleted, so its token
    answers 401: the next request of the open client (discovery, the Lease, a watch) reads the
    Secret again and goes on with the new token, with no configuration change and no new client."""
    async with kube_client(plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        await _namespaces(api, HOME, ROTATING)
        old_token = await _mirror_account(api, "mirror-old")
        await core.create_namespaced_secret(
            HOME, _secret("rotating-kubeconfig", "value", _token_config(plane, old_token))
        )
        await core.create_namespaced_config_map(
            ROTATING, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-before"), data={"v": "1"})
        )
        base = with_targets(
            Settings(workdir=tmp_path / "work"),
            plane.kubeconfig,
            target("t-rot", rule("configmaps", namespaces=(ROTATING,)), cluster="rotating"),
        )
        rotating = ClusterSettings(
            name="rotating",
            kubeconfig_secret={"namespace": HOME, "name": "rotating-kubeconfig"},
            leader_election=True,
            lease_namespace=HOME,
        )
        config = base.model_copy(update={"clusters": [*base.clusters, rotating]})
        log = open_log(config)
        await log.start()
        try:
            await log.create_topics(topic_specs(config))
            component = make_component(config, log, fast_options(config))
            await component.start()
            try:
                manager = component.manager
                await wait_for_events(log, config, lambda evs: "end" in kinds(evs, "t-rot"), "t-rot snapshot")

                new_token = await _mirror_account(api, "mirror-new")
                await core.replace_namespaced_secret(
                    "rotating-kubeconfig",
                    HOME,
                    _secret("rotating-kubeconfig", "value", _token_config(plane, new_token)),
                )
                await core.delete_namespaced_service_account("mirror-old", HOME)

                async def old_token_refused() -> bool:
                    probe = await open_client_from_dict(rotating, _token_config(plane, old_token))
                    try:
                        await probe.get_json("/api")
                    except KubeError as exc:
                        return exc.status == 401
                    finally:
                        await probe.close()
                    return False

                await wait_for(old_token_refused, what="the old token to be refused", timeout_s=60)
                # a rediscovery: without reading the Secret again its discovery would answer 401
                await component.apply(config)
                assert [p for p in manager.problems if p.target == "t-rot"] == []
                await core.create_namespaced_config_map(
                    ROTATING,
                    client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-after"), data={"v": "2"}),
                )
                await wait_for_events(
                    log, config, lambda evs: "ADDED cm-after" in kinds(evs, "t-rot"), "cm-after mirrored"
                )
                await wait_for(
                    lambda: (
                        bool(manager.streams)
                        and all(s.state == "Streaming" for s in manager.streams.values())
                    ),
                    what="streams streaming",
                    timeout_s=60,
                )
            finally:
                await component.stop()
        finally:
            await log.close()
