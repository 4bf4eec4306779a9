"""The client-side request throttle (`clusters[].qps`, `burst`): pure token-bucket arithmetic,
the async edge with an injected clock and sleep, and the settings that configure it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ClusterSettings, ConfigError, load_settings
from pipeline.kube.throttle import Throttle, TokenBucket


def test_a_full_bucket_lets_burst_requests_go_at_once() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=3)
    assert [bucket.reserve(10.0) for _ in range(3)] == [0.0, 0.0, 0.0]


def test_requests_past_the_burst_are_spaced_one_per_token() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=1)
    # the first goes; each later one at the same instant waits one more 1/qps interval
    assert [bucket.reserve(0.0) for _ in range(4)] == [0.0, 0.5, 1.0, 1.5]


def test_idle_time_refills_up_to_burst_and_no_further() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=2)
    bucket.reserve(0.0)
    bucket.reserve(0.0)
    assert bucket.reserve(0.5) == pytest.approx(0.5)  # half a token had come back
    # a long idle refills two tokens, never more
    assert [bucket.reserve(100.0) for _ in range(3)] == [0.0, 0.0, 1.0]


def test_a_clock_going_backwards_refills_nothing() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=1)
    bucket.reserve(5.0)
    assert bucket.reserve(4.0) == 1.0


@pytest.mark.parametrize(("rate", "burst", "field"), [(0.0, 1, "rate_per_s"), (1.0, 0, "burst")])
def test_a_bucket_that_could_never_pass_a_request_is_refused(rate: float, burst: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TokenBucket(rate, burst)


async def test_the_throttle_sleeps_only_for_requests_over_the_burst() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    throttle = Throttle(TokenBucket(rate_per_s=4.0, burst=2), clock=lambda: 7.0, sleep=sleep)
    for _ in range(4):
        await throttle.acquire()
    assert slept == [0.25, 0.5]


def test_a_cluster_without_qps_is_unthrottled() -> None:
    cluster = ClusterSettings(name="c")
    assert Throttle.of(cluster.qps, cluster.effective_burst) is None


def test_burst_defaults_to_qps_rounded_up() -> None:
    cluster = ClusterSettings(name="c", qps=2.5)
    throttle = Throttle.of(cluster.qps, cluster.effective_burst)
    assert throttle is not None
    assert (throttle.bucket.rate_per_s, throttle.bucket.burst) == (2.5, 3)
    assert ClusterSettings(name="c", qps=0.2).effective_burst == 1
    assert ClusterSettings(name="c", qps=5, burst=10).effective_burst == 10


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ("{name: c, qps: 0}", r"clusters\.0\.qps: .*greater than 0"),
        ("{name: c, qps: 5, burst: 0}", r"clusters\.0\.burst: .*greater than or equal to 1"),
        ("{name: c, burst: 10}", r"clusters\.0: .*burst needs qps"),
    ],
)
def test_bad_qps_and_burst_are_named(tmp_path: Path, cluster: str, message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"clusters: [{cluster}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_settings(config, environ={})


_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


async def test_open_client_gives_the_client_its_clusters_throttle(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_KUBECONFIG, encoding="utf-8")
    from pipeline.kube.client import open_client

    throttled = await open_client(ClusterSettings(name="c", kubeconfig=kubeconfig, qps=3, burst=6))
    plain = await open_client(ClusterSettings(name="c", kubeconfig=kubeconfig))
    try:
        assert throttled.throttle is not None
        assert (throttled.throttle.bucket.rate_per_s, throttled.throttle.bucket.burst) == (3, 6)
        assert plain.throttle is None
    finally:
        await throttled.close()
        await plain.close()
