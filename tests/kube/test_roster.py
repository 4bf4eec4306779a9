"""The roster of live replicas (member Leases) and a shard Lease handed over by its standing.

Against the watch-protocol test server over real HTTP (it stands in for the apiserver's Lease API;
`tests/e2e/test_watch_shards.py` runs the same on the real one). Time is a fake clock, so a crash
(a Lease nobody renews) is a clock step, not a wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pipeline.config import ClusterSettings
from pipeline.kube.client import KubeClient, open_client
from pipeline.kube.lease import LeaseElector, LeaseTerms
from pipeline.kube.roster import ROSTER_LABEL, STALE_DURATIONS, Roster, member_lease_name
from tests.watch.kube_server import FakeKubeApiServer

DURATION_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def api(kube: FakeKubeApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    yield client
    await client.close()


def roster(api: KubeClient, identity: str, clock: Clock, *, predecessor: str = "") -> Roster:
    terms = LeaseTerms(api, "ops", identity, DURATION_S, 1.0, predecessor=predecessor, clock=clock)
    return Roster(terms, "reverser-watch-src")


async def test_replicas_see_each_other_and_a_stopped_one_leaves_at_once(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    a, b = roster(api, "a", clock), roster(api, "b", clock)
    assert a.members() == {"a"}
    assert not a.listed()
    await a.round()
    await b.round()
    await a.round()
    assert a._compute_live() == {"a", "b"} == b._compute_live()
    lease = kube.leases[("ops", member_lease_name("reverser-watch-src", "a"))]
    assert ROSTER_LABEL in lease["metadata"]["labels"]
    assert lease["spec"]["holderIdentity"] == "a"
    await b.release()
    await a.round()
    assert a._compute_live() == {"a"}


async def test_a_crashed_replica_drops_out_after_a_duration_and_its_lease_is_deleted_later(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    a, crashed = roster(api, "a", clock), roster(api, "crashed", clock)
    await crashed.round()
    await a.round()
    assert a._compute_live() == {"a", "crashed"}
    clock.now += DURATION_S - 0.1
    await a.round()
    assert a._compute_live() == {"a", "crashed"}  # still within its duration
    clock.now += 0.2
    await a.round()
    assert a._compute_live() == {"a"}
    assert ("ops", member_lease_name("reverser-watch-src", "crashed")) in kube.leases
    clock.now += STALE_DURATIONS * DURATION_S
    await a.round()
    assert ("ops", member_lease_name("reverser-watch-src", "crashed")) not in kube.leases
    assert ("ops", member_lease_name("reverser-watch-src", "a")) in kube.leases


async def test_a_renewing_replica_stays_live_however_long(kube: FakeKubeApiServer, api: KubeClient) -> None:
    clock = Clock()
    a, b = roster(api, "a", clock), roster(api, "b", clock)
    for _ in range(int(3 * STALE_DURATIONS)):
        await b.round()
        await a.round()
        clock.now += DURATION_S / 2
    assert a._compute_live() == {"a", "b"}


async def test_a_restarted_replica_never_counts_its_crashed_run(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    await roster(api, "run-1", clock).round()
    restarted = roster(api, "run-2", clock, predecessor="run-1")
    await restarted.round()
    assert restarted._compute_live() == {"run-2"}
    assert ("ops", member_lease_name("reverser-watch-src", "run-1")) not in kube.leases


async def test_other_leases_in_the_namespace_are_not_members(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    kube.hold_lease("ops", "reverser-watch-src-shard-0", "someone", duration_s=10)
    kube.hold_lease("ops", "unrelated", "other", duration_s=10)
    other_roster = Roster(LeaseTerms(api, "ops", "x", DURATION_S, 1.0, clock=clock), "reverser-watch-other")
    await other_roster.round()
    a = roster(api, "a", clock)
    await a.round()
    assert a._compute_live() == {"a"}


class Assigned:
    """A standing the test flips: whether this replica is assigned the shard."""

    def __init__(self) -> None:
        self.mine = True
        self.asked: list[float] = []

    def may_take(self, vacant_s: float) -> bool:
        self.asked.append(vacant_s)
        return self.mine

    def may_keep(self) -> bool:
        return self.mine


def elector(api: KubeClient, identity: str, standing: Assigned, clock: Clock) -> LeaseElector:
    terms = LeaseTerms(api, "ops", identity, DURATION_S, 1.0, clock=clock, wall_clock=clock)
    return LeaseElector(terms, "reverser-watch-src-shard-0", standing=standing)


async def test_a_shard_lease_is_handed_over_when_the_standing_moves_it(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    first_standing, second_standing = Assigned(), Assigned()
    second_standing.mine = False
    first, second = elector(api, "a", first_standing, clock), elector(api, "b", second_standing, clock)
    assert await first._try_acquire_or_renew()
    assert not await second._try_acquire_or_renew()  # held, and not its shard
    # the roster changed: the shard is b's now
    first_standing.mine, second_standing.mine = False, True
    assert not await first._try_acquire_or_renew()  # no renewal: it hands over
    assert first.handing_over
    assert kube.leases[("ops", "reverser-watch-src-shard-0")]["spec"]["holderIdentity"] == "a"
    assert not await second._try_acquire_or_renew()  # not before a releases it or it lapses
    await first.release()
    assert await second._try_acquire_or_renew()
    assert kube.leases[("ops", "reverser-watch-src-shard-0")]["spec"]["holderIdentity"] == "b"


async def test_an_unassigned_replica_is_told_how_long_the_shard_has_been_vacant(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    standing = Assigned()
    standing.mine = False
    kube.hold_lease("ops", "reverser-watch-src-shard-0", "gone", duration_s=int(DURATION_S))
    waiting = elector(api, "b", standing, clock)
    assert not await waiting._try_acquire_or_renew()
    assert standing.asked == []  # held by a live holder: not vacant, not asked
    clock.now += DURATION_S
    assert not await waiting._try_acquire_or_renew()
    clock.now += 7.0
    assert not await waiting._try_acquire_or_renew()
    assert standing.asked == [0.0, 7.0]  # vacant since it lapsed
    standing.mine = True
    assert await waiting._try_acquire_or_renew()


async def test_a_replica_alone_at_its_first_listing_deals_only_after_its_second(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    """Replicas started together: the first to list may not see the others yet, and dealing then it
    would take every shard only to hand them over a moment later."""
    clock = Clock()
    first = roster(api, "first", clock)
    await first.round()
    assert first.members() == {"first"}
    assert not first.listed()
    late = roster(api, "late", clock)
    await late.round()
    assert late.listed()  # it sees `first` at once: nothing to wait for
    clock.now += 1.0
    await first.round()
    assert first.listed()
    assert first.members() == {"first", "late"}


async def test_a_replica_that_stays_alone_deals_from_its_second_listing(
    kube: FakeKubeApiServer, api: KubeClient
) -> None:
    clock = Clock()
    alone = roster(api, "alone", clock)
    await alone.round()
    assert not alone.listed()
    await alone.round()
    assert alone.listed()
    assert alone.members() == {"alone"}
