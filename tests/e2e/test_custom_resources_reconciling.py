"""A rule's `Reconciling` condition follows its streams on a real kube-apiserver (`make e2e`).

The WatchRule watches ConfigMaps in a namespace that does not exist yet, so its stream cannot get
past its first list (it backs off, NamespaceNotFound) for as long as the test wants: the rule must
say `Reconciling=True` (`StreamsStarting`) meanwhile, and `False` (`StreamsRunning`) once the
namespace exists and the stream streams. A change to the rule (a second item, again in a missing
namespace) makes it True again for the new generation while the first stream keeps running. The
watch stage reports its streams on the config topic; the controller reads them from there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from pipeline.customresources.objects import GROUP, VERSION, Kind
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import GitRemote
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.e2e.test_custom_resources import create, custom_object, install_crds, service_config
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

HOME = "reverser"  # the controller's namespace: its WatchRules may name other source namespaces
WAIT_S = 90.0


def _objects(remote: GitRemote) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return custom_object(kind, name, HOME, spec)

    return [
        obj(
            "GitProvider",
            "repo",
            {"url": remote.url, "allowedBranches": ["main"], "pipeline": {"push_cooldown_s": 0.2}},
        ),
        obj("GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "main", "path": "apps"}),
        obj(
            "WatchRule",
            "later",
            {
                "targetRef": {"name": "apps"},
                "rules": [{"resources": ["configmaps"], "sourceNamespace": "later"}],
            },
        ),
    ]


@pytest.fixture(scope="module")
def running(
    controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ControlPlane, ServiceProcess]]:
    workdir = tmp_path_factory.mktemp("crreconciling")
    plane = ControlPlane(workdir / "plane", controlplane_bin_dir)
    remote = GitRemote(workdir / "remote.git")
    plane.start()
    try:
        asyncio.run(_prepare(plane, remote))
        # a missing namespace is retried at most a second apart
        config = service_config(workdir / "service", plane.kubeconfig, watch_backoff_max_s=1)
        config["custom_resources"]["namespace"] = HOME
        service = ServiceProcess(workdir, config)
        service.start()
        try:
            yield plane, service
        finally:
            code = service.stop()
            assert code == 0, f"reverser run exited with {code}:\n{service.log_tail()}"
    finally:
        plane.stop()


async def _prepare(plane: ControlPlane, remote: GitRemote) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await _namespace(plane, HOME)
        for document in _objects(remote):
            await create(api, document)


async def _namespace(plane: ControlPlane, name: str) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )


async def _reconciling(plane: ControlPlane) -> tuple[int, int, dict[str, Any] | None]:
    """(generation, observedGeneration, the Reconciling condition) of the WatchRule."""
    async with kube_client(plane.kubeconfig) as api:
        rule = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, HOME, Kind.WATCH_RULE.plural, "later"
        )
    status = rule.get("status") or {}
    condition = next((c for c in status.get("conditions", []) if c["type"] == "Reconciling"), None)
    return rule["metadata"]["generation"], status.get("observedGeneration", 0), condition


async def _until(plane: ControlPlane, status: str, reason: str) -> dict[str, Any]:
    """Wait until the current generation's Reconciling condition is (status, reason); returns it."""
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        generation, observed, condition = await _reconciling(plane)
        if condition is None or observed != generation:
            return False
        seen.update(condition)
        return (condition["status"], condition["reason"]) == (status, reason)

    await wait_for(reached, f"Reconciling={status} ({reason}); last seen {seen}", timeout_s=WAIT_S)
    return seen


async def test_reconciling_follows_the_streams_of_a_rule_and_of_its_change(
    running: tuple[ControlPlane, ServiceProcess],
) -> None:
    plane, service = running
    starting = await _until(plane, "True", "StreamsStarting")
    assert starting["message"] == "1 of 1 streams not streaming yet: v1/configmaps in later"
    # it stays True while the stream cannot start (not a timer): after two more failed attempts
    # and longer than the report interval and the controller's settle delay, it still says so
    retries = service.metric_sum("reverser_watch_reconnects_total")
    service.wait_for_metric("reverser_watch_reconnects_total", retries + 2, WAIT_S)
    generation, observed, condition = await _reconciling(plane)
    assert observed == generation
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "StreamsStarting")

    await _namespace(plane, "later")
    running_now = await _until(plane, "False", "StreamsRunning")
    assert running_now["message"] == "1 streams running"

    async with kube_client(plane.kubeconfig) as api:
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            HOME,
            Kind.WATCH_RULE.plural,
            "later",
            [
                {
                    "op": "add",
                    "path": "/spec/rules/-",
                    "value": {"resources": ["configmaps"], "sourceNamespace": "later2"},
                }
            ],
        )
    changed = await _until(plane, "True", "StreamsStarting")
    assert changed["observedGeneration"] == generation + 1
    assert changed["message"] == "1 of 2 streams not streaming yet: v1/configmaps in later2"
    await _namespace(plane, "later2")
    done = await _until(plane, "False", "StreamsRunning")
    assert done["message"] == "2 streams running"
