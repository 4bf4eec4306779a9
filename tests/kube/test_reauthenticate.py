"""A 401 reads a cluster's credentials again (`KubeClient`'s `reauthenticate`), and a client opened
from a kubeconfig Secret re-reads the Secret: a rotated token heals the client in place, an
unchanged Secret leaves the 401 standing, and however many requests meet the 401 the Secret is
read once. Against the watch-protocol test server over real HTTP (it accepts only the tokens it is
told, as a kube-apiserver does after a rotation); the real kube-apiserver rotation is
tests/e2e/test_remote_clusters.py."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import ClusterSettings, KubeconfigSecretReference
from pipeline.kube.client import REAUTH_INTERVAL_S, KubeClient, KubeError, api_client_from_dict, open_client
from pipeline.kube.kubeconfigsecret import with_kubeconfig_secrets
from tests.watch.kube_server import FakeKubeApiServer

REF = KubeconfigSecretReference(namespace="reverser", name="remote-kubeconfig")
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def _kubeconfig(kube: FakeKubeApiServer, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "remote", "cluster": {"server": f"http://127.0.0.1:{kube.port}"}}],
        "users": [{"name": "mirror", "user": {"token": token}}],
        "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": "mirror"}}],
        "current-context": "remote",
    }


def _store_secret(kube: FakeKubeApiServer, token: str) -> None:
    body = base64.b64encode(json.dumps(_kubeconfig(kube, token)).encode()).decode()
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"namespace": REF.namespace, "name": REF.name},
            "data": {"value": body},
        }
    )


def _secret_reads(kube: FakeKubeApiServer) -> int:
    return sum(1 for path, _ in kube.requests if path.endswith(f"/secrets/{REF.name}"))


async def _remote(kube: FakeKubeApiServer, tmp_path: Path) -> KubeClient:
    holder = ClusterSettings(name="home", kubeconfig=kube.kubeconfig(tmp_path))  # token test-token
    factory = with_kubeconfig_secrets(open_client, holder)
    return await factory(ClusterSettings(name="remote", kubeconfig_secret=REF))


async def test_a_rotated_token_heals_the_open_client(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    kube.tokens = {"test-token", "old-token"}
    _store_secret(kube, "old-token")
    remote = await _remote(kube, tmp_path)
    try:
        await remote.get_json(CONFIGMAPS)
        # the old token is revoked, and the new one put in the Secret
        kube.tokens = {"test-token", "new-token"}
        _store_secret(kube, "new-token")
        reads = _secret_reads(kube)
        assert (await remote.get_json(CONFIGMAPS))["kind"] == "ConfigMapList"
        assert remote.credentials_generation == 1
        assert _secret_reads(kube) == reads + 1
        await remote.discover()  # every later request goes with the new token
        assert _secret_reads(kube) == reads + 1
    finally:
        await remote.close()


async def test_an_unchanged_secret_leaves_the_401_standing(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    kube.tokens = {"test-token", "old-token"}
    _store_secret(kube, "old-token")
    remote = await _remote(kube, tmp_path)
    try:
        kube.tokens = {"test-token"}  # revoked, and nobody rotated the Secret yet
        with pytest.raises(KubeError) as caught:
            await remote.get_json(CONFIGMAPS)
        assert caught.value.status == 401
        assert remote.credentials_generation == 0
    finally:
        await remote.close()


async def test_a_secret_gone_unusable_leaves_the_401_standing(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    kube.tokens = {"test-token", "old-token"}
    _store_secret(kube, "old-token")
    remote = await _remote(kube, tmp_path)
    try:
        kube.tokens = {"test-token"}
        kube.delete(("v1", "Secret"), REF.namespace, REF.name)
        with pytest.raises(KubeError) as caught:
            await remote.get_json(CONFIGMAPS)
        assert caught.value.status == 401
    finally:
        await remote.close()


async def test_requests_meeting_the_401_together_read_the_credentials_once(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    kube.tokens = {"new-token"}
    calls: list[int] = []
    entered = asyncio.Event()
    release = asyncio.Event()

    async def reauthenticate() -> Any:
        calls.append(1)
        entered.set()
        await release.wait()  # the other requests meet their 401 meanwhile
        return await api_client_from_dict(_kubeconfig(kube, "new-token"))

    client = KubeClient(
        await api_client_from_dict(_kubeconfig(kube, "old-token")), "remote", None, reauthenticate
    )
    try:
        requests = [asyncio.ensure_future(client.get_json(CONFIGMAPS)) for _ in range(5)]
        await entered.wait()
        release.set()
        answers = await asyncio.gather(*requests)
        assert [a["kind"] for a in answers] == ["ConfigMapList"] * 5
        assert calls == [1]
        assert client.credentials_generation == 1
    finally:
        await client.close()


async def test_the_credentials_are_read_again_at_most_every_interval(kube: FakeKubeApiServer) -> None:
    kube.tokens = {"nobody"}
    now = [100.0]
    calls: list[float] = []

    async def reauthenticate() -> Any:
        calls.append(now[0])
        return None  # unchanged

    client = KubeClient(
        await api_client_from_dict(_kubeconfig(kube, "old-token")),
        "remote",
        None,
        reauthenticate,
        clock=lambda: now[0],
    )
    try:
        for advance in (0.0, 1.0, REAUTH_INTERVAL_S - 1.5, 1.0):
            now[0] += advance
            with pytest.raises(KubeError):
                await client.get_json(CONFIGMAPS)
        # the first 401, nothing until the interval passed, then the 401 after it
        assert calls == [100.0, 100.0 + REAUTH_INTERVAL_S + 0.5]
    finally:
        await client.close()


async def test_a_client_without_reauthentication_answers_the_401(kube: FakeKubeApiServer) -> None:
    kube.tokens = {"other"}
    client = KubeClient(await api_client_from_dict(_kubeconfig(kube, "old-token")), "remote")
    try:
        with pytest.raises(KubeError) as caught:
            await client.get_json(CONFIGMAPS)
        assert (caught.value.status, caught.value.reason) == (401, "Unauthorized")
    finally:
        await client.close()
