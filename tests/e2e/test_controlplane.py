"""The control plane on its own: audit batches reach a real TLS webhook, attributed to the actor.

These pin what every other end-to-end test relies on: the apiserver posts `audit.k8s.io/v1`
EventLists over mutual TLS with its client certificate, within about the batch wait; impersonated
writes carry `impersonatedUser`; reads are not audited; a 5xx answer makes the apiserver retry the
batch; and the RBAC wiring refuses strangers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.e2e.audit_receiver import AuditReceiver
from tests.e2e.cluster.controlplane import ControlPlane, ControlPlaneState
from tests.e2e.cluster.pki import ADMIN_CN, AUDIT_CLIENT_CN
from tests.e2e.kube import ALICE, BOB, FINALIZER_SA, grant_cluster_admin, kube_client

pytestmark = pytest.mark.e2e

ROUTE = "e2e-controlplane"
NAMESPACE = "cp-audit"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def plane_and_receiver(
    controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory, audit_port: int
) -> Iterator[tuple[ControlPlane, AuditReceiver]]:
    plane = ControlPlane(
        tmp_path_factory.mktemp("controlplane"),
        controlplane_bin_dir,
        f"https://127.0.0.1:{audit_port}/audit-webhook/{ROUTE}",
    )
    receiver = AuditReceiver(audit_port, plane.pki.ingress_cert, plane.pki.ingress_key, plane.pki.ca)
    receiver.start()
    try:
        plane.start()
        try:
            asyncio.run(grant_cluster_admin(plane.kubeconfig))
            yield plane, receiver
        finally:
            plane.stop()
    finally:
        receiver.stop()


@pytest.fixture
def plane(plane_and_receiver: tuple[ControlPlane, AuditReceiver]) -> ControlPlane:
    return plane_and_receiver[0]


@pytest.fixture
def receiver(plane_and_receiver: tuple[ControlPlane, AuditReceiver]) -> AuditReceiver:
    return plane_and_receiver[1]


def _is(verb: str, name: str, actor: str) -> Any:
    def predicate(event: dict[str, Any]) -> bool:
        ref = event.get("objectRef", {})
        return bool(
            event.get("verb") == verb
            and ref.get("resource") == "configmaps"
            and ref.get("name") == name
            and event.get("impersonatedUser", {}).get("username") == actor
        )

    return predicate


async def _ensure_namespace(kubeconfig: Path) -> None:
    async with kube_client(kubeconfig, ALICE) as api:
        core = client.CoreV1Api(api)
        try:
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        except ApiException as exc:
            if exc.status != 409:
                raise


async def test_impersonated_writes_reach_the_webhook_attributed_to_the_actor(
    plane: ControlPlane, receiver: AuditReceiver
) -> None:
    await _ensure_namespace(plane.kubeconfig)
    async with kube_client(plane.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-1"), data={"k": "v1"})
        )
        await client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE)
    async with kube_client(plane.kubeconfig, BOB) as api:
        await client.CoreV1Api(api).patch_namespaced_config_map("cm-1", NAMESPACE, {"data": {"k": "v2"}})
    async with kube_client(plane.kubeconfig, FINALIZER_SA) as api:
        await client.CoreV1Api(api).delete_namespaced_config_map("cm-1", NAMESPACE)

    created = await asyncio.to_thread(receiver.wait_for, _is("create", "cm-1", ALICE), WAIT_S)
    patched = await asyncio.to_thread(receiver.wait_for, _is("patch", "cm-1", BOB), WAIT_S)
    deleted = await asyncio.to_thread(receiver.wait_for, _is("delete", "cm-1", FINALIZER_SA), WAIT_S)
    assert len(created) == len(patched) == len(deleted) == 1

    create = created[0]
    assert create["stage"] == "ResponseComplete"
    assert create["level"] == "RequestResponse"
    # The impersonator is the admin certificate; the actor is only in impersonatedUser.
    assert create["user"]["username"] == ADMIN_CN
    assert create["responseObject"]["metadata"]["uid"]
    assert create["responseObject"]["data"] == {"k": "v1"}
    assert patched[0]["responseObject"]["data"] == {"k": "v2"}
    assert "system:serviceaccounts" in deleted[0]["impersonatedUser"]["groups"]

    batches = receiver.batches()
    assert {b.route for b in batches} == {ROUTE}
    assert {b.client_cn for b in batches} == {AUDIT_CLIENT_CN}
    assert {(b.body["apiVersion"], b.body["kind"]) for b in batches} == {("audit.k8s.io/v1", "EventList")}
    # The policy records mutating verbs only: the list above must not be posted.
    assert not [e for e in receiver.events() if e.get("verb") in ("get", "list", "watch")]


async def test_a_batch_answered_5xx_is_posted_again(plane: ControlPlane, receiver: AuditReceiver) -> None:
    await _ensure_namespace(plane.kubeconfig)
    # Let earlier writes drain so the failing answer hits the batch holding this test's write: a
    # marker write reaching the receiver means every batch before it has been posted.
    async with kube_client(plane.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="drain-marker"), data={"k": "v"})
        )
    drained = await asyncio.to_thread(receiver.wait_for, _is("create", "drain-marker", ALICE), WAIT_S)
    assert len(drained) == 1, "the marker write never reached the receiver"
    receiver.fail_next(1)
    async with kube_client(plane.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="retry-me"), data={"k": "v"})
        )

    accepted = await asyncio.to_thread(receiver.wait_for, _is("create", "retry-me", ALICE), WAIT_S)
    assert len(accepted) == 1
    rejected = [
        event
        for batch in receiver.batches()
        if batch.status == 503
        for event in batch.items
        if _is("create", "retry-me", ALICE)(event)
    ]
    assert [e["auditID"] for e in rejected] == [accepted[0]["auditID"]]


async def test_strangers_are_refused(plane: ControlPlane) -> None:
    async with kube_client(plane.kubeconfig, "mallory") as api:
        with pytest.raises(ApiException) as forbidden:
            await client.CoreV1Api(api).list_namespaced_config_map("default")
    assert forbidden.value.status == 403

    configuration = client.Configuration(host=plane.server)
    configuration.ssl_ca_cert = str(plane.pki.ca)
    async with client.ApiClient(configuration=configuration) as anonymous:
        with pytest.raises(ApiException) as unauthorised:
            await client.CoreV1Api(anonymous).list_namespaced_config_map("default")
    # Anonymous requests are either unauthenticated (401) or authenticated as system:anonymous
    # and then refused by RBAC (403); both prove a client certificate is required to act.
    assert unauthorised.value.status in (401, 403)


def test_the_cli_leaves_the_control_plane_running_until_stop(
    controlplane_bin_dir: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "cli"
    started = subprocess.run(
        [sys.executable, "-m", "tests.e2e.cluster.controlplane", "start", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "REVERSER_E2E_BIN_DIR": str(controlplane_bin_dir)},
    )
    assert started.returncode == 0, started.stderr
    kubeconfig = Path(started.stdout.strip())
    state = ControlPlaneState.load(workdir)
    try:
        # The starting process has exited; the apiserver it started still answers.
        namespaces = asyncio.run(_namespace_names(kubeconfig))
        assert "default" in namespaces
    finally:
        stopped = subprocess.run(
            [sys.executable, "-m", "tests.e2e.cluster.controlplane", "stop", "--workdir", str(workdir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert stopped.returncode == 0, stopped.stderr
    for pid in (state.apiserver_pid, state.etcd_pid):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (workdir / "state.json").exists()


async def _namespace_names(kubeconfig: Path) -> set[str]:
    async with kube_client(kubeconfig) as api:
        return {ns.metadata.name for ns in (await client.CoreV1Api(api).list_namespace()).items}
