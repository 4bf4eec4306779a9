"""A CommitRequest's submitter, captured by the admission fact source of a real kube-apiserver.

The control plane runs with no audit backend; a ValidatingWebhookConfiguration sends the reviews
of CommitRequest creates to `reverser run`'s admission endpoint, whose fact of the create names
the user. The controller finds it by the request's uid: `AuthorAttributed` `True`
`AttributedFromAdmission`, naming alice. The route's only watched type is `configmaps` (the
WatchRule), so the fact also proves the ingress keeps CommitRequest facts on the custom
resources' route.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.customresources.objects import GROUP, VERSION, Kind
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import ALICE, grant_cluster_admin, kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_commit_requests import NAMESPACE, WAIT_S, Setup, _objects, _status
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.e2e.webhooks import admission_webhook
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

ROUTE = "default"  # the cluster's name in service_config, so its route
TOKEN_ENV = "E2E_CR_ADMISSION_TOKEN"
TOKEN = "e2e-commitrequest-admission-token-7a2d"
ATTEMPTS = 20


@pytest.fixture(scope="module")
def setup(controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("crauthor")
    port = free_port()
    plane = ControlPlane(workdir / "plane", controlplane_bin_dir)  # no audit backend
    remote = GitRemote(workdir / "remote.git")
    os.environ[TOKEN_ENV] = TOKEN
    plane.start()
    try:
        asyncio.run(_prepare(plane, remote, port))
        config = service_config(workdir / "service", plane.kubeconfig)
        config["audit"] = {
            "addr": f"127.0.0.1:{port}",
            "tls": {"cert_file": str(plane.pki.ingress_cert), "key_file": str(plane.pki.ingress_key)},
            "routes": [{"name": ROUTE, "bearer_tokens_env": [TOKEN_ENV]}],
            "admission": {"enabled": True},
        }
        service = ServiceProcess(workdir, config)
        service.start()
        try:
            streams = len(Kind) + 1
            service.wait_for_metric("reverser_watch_snapshots_total", streams, WAIT_S, outcome="completed")
            yield Setup(plane, remote, service)
        finally:
            code = service.stop()
            assert code in (0, None), f"reverser run exited with {code}:\n{service.log_tail()}"
    finally:
        plane.stop()
        os.environ.pop(TOKEN_ENV, None)


async def _prepare(plane: ControlPlane, remote: GitRemote, port: int) -> None:
    await grant_cluster_admin(plane.kubeconfig)
    webhook = admission_webhook(
        f"https://127.0.0.1:{port}/admission-webhook/{ROUTE}/{TOKEN}",
        plane.pki.ca.read_bytes(),
        rules=[
            {
                "operations": ["CREATE"],
                "apiGroups": [GROUP],
                "apiVersions": [VERSION],
                "resources": [Kind.COMMIT_REQUEST.plural],
            }
        ],
    )
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )
        for document in _objects(remote):
            await create(api, document)
        await client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(webhook)


async def _attributed(setup: Setup, name: str) -> dict[str, Any]:
    """Create a CommitRequest as alice and return its AuthorAttributed condition once written."""
    async with kube_client(setup.plane.kubeconfig, ALICE) as api:
        await create(api, custom_object("CommitRequest", name, NAMESPACE, {"gitTargetRef": {"name": "apps"}}))
    found: dict[str, Any] = {}

    async def written() -> bool:
        status = await _status(setup.plane, name)
        found.update(next((c for c in status.get("conditions", []) if c["type"] == "AuthorAttributed"), {}))
        return bool(found)

    await wait_for(written, f"CommitRequest {name}'s AuthorAttributed", timeout_s=WAIT_S)
    return found


def test_the_submitter_captured_at_admission_is_named(setup: Setup) -> None:
    # The apiserver picks the webhook configuration up within moments; until then failurePolicy
    # Ignore admits a request with no fact, which must then say CommitterFallback.
    seen: list[tuple[str, str]] = []
    for attempt in range(ATTEMPTS):
        condition = asyncio.run(_attributed(setup, f"save-{attempt}"))
        seen.append((condition["status"], condition["reason"]))
        if condition["reason"] == "AttributedFromAdmission":
            assert condition["status"] == "True"
            assert ALICE in condition["message"]
            break
        assert seen[-1] == ("False", "CommitterFallback"), seen
    else:
        pytest.fail(f"no request was attributed from admission: {seen}\n{setup.service.log_tail()}")
