"""`clusters[].qps`/`burst` reach the wire: every request of a cluster's client (discovery, LIST,
WATCH) first takes a token of its bucket. Against the watch-protocol test server over real HTTP;
the throttle's clock is frozen and its sleep recorded, so nothing here waits or is timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ClusterSettings
from pipeline.kube.client import open_client
from pipeline.kube.throttle import Throttle, TokenBucket
from tests.watch.kube_server import FakeKubeApiServer


async def test_requests_past_the_burst_wait_for_their_token(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    cluster = ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path), qps=10, burst=2)
    client = await open_client(cluster)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    assert client.throttle is not None
    bucket = client.throttle.bucket
    client.throttle = Throttle(TokenBucket(bucket.rate_per_s, bucket.burst), clock=lambda: 0.0, sleep=sleep)
    try:
        await client.discover()  # several requests: /api, /apis and each group version
        for _ in range(3):
            await client.get_json("/api/v1/namespaces/default/configmaps")
    finally:
        await client.close()
    # the first two went at once (burst), every later one 0.1 s (1/qps) after the one before
    assert len(slept) >= 3
    assert slept == pytest.approx([0.1 * n for n in range(1, len(slept) + 1)])


async def test_an_unthrottled_cluster_never_waits(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    try:
        assert client.throttle is None
        await client.discover()
    finally:
        await client.close()
