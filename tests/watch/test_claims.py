"""A second watcher of the same cluster is detected and reported, never silently doubled.

The pure `ClaimBook` decides by log offsets; the watch components run on a real log (both
backends) against the watch-protocol test server. `test_claims_processes.py` does the same with
two real `reverser run` processes.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.codec.watch_claim import Claim
from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.watch.claims import RIVAL_EXPIRY_INTERVALS, ClaimBook
from pipeline.watch.component import WatchComponent
from tests.support.wait import wait_for
from tests.watch.conftest import fast_options, rule, target, with_targets
from tests.watch.kube_server import FakeKubeApiServer

INTERVAL_MS = 1000


def claim(identity: str, cluster: str = "prod", elected: bool = False) -> Claim:
    return Claim(cluster, identity, elected, INTERVAL_MS)


def test_a_rival_is_a_claim_written_after_our_first_one() -> None:
    book = ClaimBook("me")
    book.observe(claim("old"), offset=3, timestamp_ms=10_000)  # before we started: no rival
    book.started("prod", 5)
    book.observe(claim("me"), offset=5, timestamp_ms=10_500)
    assert book.rivals("prod") == []
    book.observe(claim("other"), offset=6, timestamp_ms=11_000)
    assert book.rivals("prod") == [claim("other")]
    assert book.rivals("staging") == []  # not watched here
    book.observe(claim("third", cluster="staging"), offset=7, timestamp_ms=11_100)
    assert book.rivals("prod") == [claim("other")]


def test_a_rival_that_stops_claiming_expires_by_the_topics_own_clock() -> None:
    book = ClaimBook("me")
    book.started("prod", 0)
    book.observe(claim("other"), offset=1, timestamp_ms=20_000)
    book.observe(claim("me"), offset=2, timestamp_ms=20_000 + RIVAL_EXPIRY_INTERVALS * INTERVAL_MS)
    assert book.rivals("prod") == [claim("other")]
    book.observe(claim("me"), offset=3, timestamp_ms=20_001 + RIVAL_EXPIRY_INTERVALS * INTERVAL_MS)
    assert book.rivals("prod") == []


def test_stopping_and_starting_again_moves_the_starting_point() -> None:
    book = ClaimBook("me")
    book.started("prod", 0)
    book.observe(claim("other"), offset=1, timestamp_ms=1)
    book.stopped("prod")
    assert book.rivals("prod") == []
    book.started("prod", 4)
    assert book.rivals("prod") == []  # its claim at 1 predates our new start
    assert book.clusters() == ["prod"]


def detected(cluster: str = "src") -> float:
    return (
        REGISTRY.get_sample_value("reverser_watch_concurrent_watchers_detected_total", {"cluster": cluster})
        or 0.0
    )


def claims_read() -> float:
    return REGISTRY.get_sample_value("reverser_watch_claims_total", {"direction": "read"}) or 0.0


def configured(settings: Settings, kubeconfig: Path, *, elected: bool) -> Settings:
    config = with_targets(settings, kubeconfig, target("t1", rule("configmaps", namespaces=("team-a",))))
    cluster = config.clusters[0].model_copy(
        update={
            "leader_election": elected,
            "lease_namespace": "ops",
            "lease_duration_s": 1.0,
            "lease_renew_s": 0.05,
            "watch_claim_interval_s": 0.1,
        }
    )
    return config.model_copy(update={"clusters": [cluster]})


async def two_watchers(
    kube: FakeKubeApiServer, log: Log, settings: Settings, tmp_path: Path, *, elected: bool
) -> tuple[WatchComponent, WatchComponent]:
    """Two started watch components of one cluster (identities replica-1 and replica-2)."""
    kube.namespaces["team-a"] = "Active"
    config = configured(settings, kube.kubeconfig(tmp_path), elected=elected)
    first = WatchComponent(config, log, options=fast_options(config), identity="replica-1")
    second = WatchComponent(config, log, options=fast_options(config), identity="replica-2")
    await first.start()
    await second.start()
    return first, second


async def test_two_watchers_without_election_see_each_other(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    before = detected()
    first, second = await two_watchers(kube, topics_log, settings, tmp_path, elected=False)
    try:
        await wait_for(
            lambda: (
                first.manager.claims.rival_counts() == {"src": 1}
                and second.manager.claims.rival_counts() == {"src": 1}
            ),
            what="both watchers to see the other",
        )
        assert detected() == before + 2  # once per watcher and rival, not per claim
        gauge = REGISTRY.get_sample_value("reverser_watch_concurrent_watchers", {"cluster": "src"})
        assert gauge == 2.0
    finally:
        await second.stop()
        await first.stop()


async def test_one_elected_watcher_and_a_restarted_one_are_alone(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    before = detected()
    first, second = await two_watchers(kube, topics_log, settings, tmp_path, elected=True)
    try:
        await wait_for(lambda: bool(first.manager.streams) or bool(second.manager.streams), what="a leader")
        leader = first if first.manager.streams else second
        read_before = claims_read()
        # a positive signal that claims flow: several of the leader's heartbeats were read back
        await wait_for(lambda: claims_read() >= read_before + 5, what="claims read back")
        assert leader.manager.claims.rival_counts() == {"src": 0}
        await leader.stop()  # hand-over: the new leader's claims all follow the old one's
        standby = second if leader is first else first
        await wait_for(lambda: bool(standby.manager.streams), what="the hand-over")
        read_before = claims_read()
        await wait_for(lambda: claims_read() >= read_before + 5, what="the new leader's claims")
        assert standby.manager.claims.rival_counts() == {"src": 0}
    finally:
        await first.stop()
        await second.stop()
    assert detected() == before
