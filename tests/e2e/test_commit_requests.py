"""A CommitRequest on a real kube-apiserver closes a long commit window now (`make e2e`).

The GitProvider's commit window is five minutes, so without the request nothing would reach Git
during the test. A ConfigMap change opens the window; a CommitRequest (gitops-reverser's sample
shape: `gitTargetRef`, `message`, `closeDelaySeconds`) closes it; its status then carries the
commit's sha, which is on the remote with the request's message and the change. A request with
nothing open ends `NothingToCommit`, and one naming a missing GitTarget says so and waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
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

NAMESPACE = "team-a"
WAIT_S = 90.0


@dataclass(frozen=True, slots=True)
class Setup:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess


def _objects(remote: GitRemote) -> list[dict[str, Any]]:
    return [
        custom_object(
            "GitProvider",
            "repo",
            NAMESPACE,
            {
                "url": remote.url,
                "allowedBranches": ["main"],
                "push": {"commitWindow": "5m"},
                "pipeline": {"push_cooldown_s": 0.2, "commit_window_max_s": 600},
            },
        ),
        custom_object(
            "GitTarget",
            "apps",
            NAMESPACE,
            {"providerRef": {"name": "repo"}, "branch": "main", "path": "apps"},
        ),
        custom_object(
            "WatchRule",
            "apps",
            NAMESPACE,
            {"targetRef": {"name": "apps"}, "rules": [{"resources": ["configmaps"]}]},
        ),
    ]


@pytest.fixture(scope="module")
def setup(controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("commitrequests")
    plane = ControlPlane(workdir / "plane", controlplane_bin_dir)
    remote = GitRemote(workdir / "remote.git")
    plane.start()
    try:
        asyncio.run(_prepare(plane, remote))
        service = ServiceProcess(workdir, service_config(workdir / "service", plane.kubeconfig))
        service.start()
        try:
            # the controller's streams (one per kind) and the WatchRule's ConfigMaps stream
            streams = len(Kind) + 1
            service.wait_for_metric("reverser_watch_snapshots_total", streams, WAIT_S, outcome="completed")
            yield Setup(plane, remote, service)
        finally:
            code = service.stop()
            assert code in (0, None), f"reverser run exited with {code}:\n{service.log_tail()}"
    finally:
        plane.stop()


async def _prepare(plane: ControlPlane, remote: GitRemote) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await install_crds(api)
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )
        for document in _objects(remote):
            await create(api, document)


async def _request(plane: ControlPlane, name: str, spec: dict[str, Any]) -> None:
    async with kube_client(plane.kubeconfig) as api:
        await create(api, custom_object("CommitRequest", name, NAMESPACE, spec))


async def _status(plane: ControlPlane, name: str) -> dict[str, Any]:
    async with kube_client(plane.kubeconfig) as api:
        found = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, Kind.COMMIT_REQUEST.plural, name
        )
    assert isinstance(found, dict)
    status = found.get("status") or {}
    assert isinstance(status, dict)
    return status


def _ready(status: dict[str, Any]) -> tuple[str, str]:
    found = {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions", [])}
    return found.get("Ready", ("", ""))


def _wait_ready_reason(setup: Setup, name: str, reasons: set[str]) -> dict[str, Any]:
    """The request's status once its Ready reason is one of `reasons` (fails with the status and
    the service's log)."""

    async def done() -> bool:
        return _ready(await _status(setup.plane, name))[1] in reasons

    try:
        asyncio.run(wait_for(done, f"CommitRequest {name} to reach {sorted(reasons)}", timeout_s=WAIT_S))
    except AssertionError as exc:
        status = asyncio.run(_status(setup.plane, name))
        raise AssertionError(f"{exc}; status {status}\n{setup.service.log_tail()}") from None
    return asyncio.run(_status(setup.plane, name))


async def _configmap(plane: ControlPlane, name: str) -> None:
    async with kube_client(plane.kubeconfig) as api:
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"memory": "2Gi"})
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, body)


def test_a_commit_request_closes_the_window_and_its_status_carries_the_sha(setup: Setup) -> None:
    plane, remote = setup.plane, setup.remote
    before = remote.head()
    asyncio.run(_configmap(plane, "checkout"))
    setup.service.wait_for_metric(
        "reverser_commit_pending_work", 1, WAIT_S, provider="team-a/repo", branch="main"
    )
    held = [(c.subject, c.changes) for c in remote.commits(since=before)]
    assert held == [], f"a five-minute window holds the change:\n{setup.service.log_tail()}"
    message = "Increase checkout API memory after load-test failures"
    asyncio.run(_request(plane, "save-1", {"gitTargetRef": {"name": "apps"}, "message": message}))
    status = _wait_ready_reason(setup, "save-1", {"Committed"})
    sha = status["sha"]
    assert status["branch"] == "main"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions["Pushed"] == ("True", "Pushed")
    # the cluster delivers no facts here (no audit webhook, no admission webhook): the lookup ran
    # and found no submitter
    assert conditions["AuthorAttributed"] == ("False", "CommitterFallback")
    (commit,) = [c for c in remote.commits() if c.sha == sha]
    assert commit.subject == message
    assert ("A", "apps/team-a/configmaps/checkout.yaml") in commit.changes
    assert "memory: 2Gi" in remote.files()["apps/team-a/configmaps/checkout.yaml"]


def test_a_request_with_nothing_open_finds_nothing_to_commit(setup: Setup) -> None:
    head = setup.remote.head()
    asyncio.run(_request(setup.plane, "save-2", {"gitTargetRef": {"name": "apps"}, "closeDelaySeconds": 0}))
    status = _wait_ready_reason(setup, "save-2", {"NothingToCommit"})
    assert "sha" not in status
    assert setup.remote.head() == head


def test_a_request_for_a_missing_target_waits_and_names_it(setup: Setup) -> None:
    asyncio.run(_request(setup.plane, "save-3", {"gitTargetRef": {"name": "nope"}}))
    status = _wait_ready_reason(setup, "save-3", {"GitTargetUnavailable"})
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "team-a/nope" in ready["message"]


def test_a_request_the_schema_lets_through_but_gitops_reverser_refuses_is_invalid(setup: Setup) -> None:
    """A whitespace-only message passes the CRD's pattern; the controller refuses it by name, counts it."""
    asyncio.run(_request(setup.plane, "save-4", {"gitTargetRef": {"name": "apps"}, "message": "   "}))
    status = _wait_ready_reason(setup, "save-4", {"Invalid"})
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "spec.message: must contain a non-whitespace character"
    assert setup.service.metric_sum("reverser_config_commit_requests_total", outcome="invalid") == 1
    assert setup.service.metric_sum("reverser_config_commit_requests_total", outcome="sent") >= 2
