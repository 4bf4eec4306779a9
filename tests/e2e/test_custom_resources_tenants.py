"""A tenant's GitProvider cannot read the pod's variables, on a real `reverser run` (issue 27).

The reproduction: a GitProvider in a team's namespace named a variable of the service's pod as its
`spec.pipeline.password_env`, with `allow_plain_http_credentials: true` and an http:// remote the
team runs; the commit worker sent the value as Basic auth. Now the object is refused in its status
naming the fields, its target and rule with it, and the team's remote never hears from the
service, while a platform object in the controller's namespace keeps mirroring.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.customresources.objects import GROUP, VERSION, Kind
from tests.commit.httpgit import serving
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

HOME = "reverser"
TENANT = "team-x"
VARIABLE, VALUE = "PLATFORM_GIT_TOKEN", "platform-only-Pa55-e2e"
WAIT_S = 90.0


def _tenant_objects(url: str) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, TENANT, spec)

    return [
        obj(
            "GitProvider",
            "repo",
            {
                "url": url,
                "allowedBranches": ["main"],
                "pipeline": {
                    "username_env": "HOSTNAME",
                    "password_env": VARIABLE,
                    "allow_plain_http_credentials": True,
                },
            },
        ),
        obj("GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "main", "path": TENANT}),
        obj("WatchRule", "apps", {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]}),
    ]


def _platform_objects(url: str) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, HOME, spec)

    return [
        obj("GitProvider", "repo", {"url": url, "allowedBranches": ["main"], "push": {"commitWindow": "0s"}}),
        obj("GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "main", "path": "platform"}),
        obj("WatchRule", "apps", {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]}),
    ]


async def _status(plane: ControlPlane, namespace: str, kind: Kind, name: str) -> dict[str, Any]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, kind.plural, name
        )
    assert isinstance(found, dict)
    return dict(found.get("status") or {})


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})


async def _configmap(plane: ControlPlane, namespace: str, name: str) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": name})
        )


def test_a_tenant_provider_naming_a_pod_variable_is_refused_and_sends_nothing(
    controlplane_bin_dir: Path, tmp_path: Path
) -> None:
    plane = ControlPlane(tmp_path / "plane", controlplane_bin_dir)
    platform_remote = GitRemote(tmp_path / "platform.git")
    plane.start()
    try:
        with serving(tmp_path / "http", ["team.git"], "someone", "anything") as team_remote:

            async def prepare() -> None:
                async with kube_client(plane.kubeconfig) as api:
                    await install_crds(api)
                    for namespace in (HOME, TENANT):
                        await client.CoreV1Api(api).create_namespace(
                            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
                        )
                    for document in [
                        *_platform_objects(platform_remote.url),
                        *_tenant_objects(f"{team_remote.base_url}/team.git"),
                    ]:
                        await create(api, document)

            asyncio.run(prepare())
            config = service_config(tmp_path / "service", plane.kubeconfig)
            # the platform grants the team its own remote: the refusal is the boundary's, not the policy's
            grant = {
                "namespaces": [TENANT],
                "url_prefixes": [f"{team_remote.base_url}/"],
                "path_prefixes": ["."],
            }
            config["custom_resources"]["tenants"] = [grant]
            service = ServiceProcess(tmp_path, config)
            service.env[VARIABLE] = VALUE
            service.start()
            try:

                async def refused() -> bool:
                    ready = _ready(await _status(plane, TENANT, Kind.GIT_PROVIDER, "repo"))
                    return ready.get("reason") == "Invalid"

                asyncio.run(wait_for(refused, "GitProvider team-x/repo refused", timeout_s=WAIT_S))
                ready = _ready(asyncio.run(_status(plane, TENANT, Kind.GIT_PROVIDER, "repo")))
                assert ready["status"] == "False"
                for field in ("password_env", "username_env", "allow_plain_http_credentials"):
                    assert (
                        f"spec.pipeline.{field}: may be set only in the controller's namespace"
                        in ready["message"]
                    )
                assert VALUE not in ready["message"]

                asyncio.run(_configmap(plane, TENANT, "team-change"))
                asyncio.run(_configmap(plane, HOME, "platform-change"))
                platform_remote.wait_for(
                    lambda r: "platform/reverser/configmaps/platform-change.yaml" in r.files(),
                    WAIT_S,
                    "the platform's change pushed",
                )
                assert team_remote.requests == [], "the service never contacted the tenant's remote"
                assert all(VALUE not in header for header in team_remote.authorizations)
                assert VALUE not in service.log_tail(10_000)
            finally:
                code = service.stop()
                assert code == 0, f"reverser run exited with {code}:\n{service.log_tail()}"
    finally:
        plane.stop()
