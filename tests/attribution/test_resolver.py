"""Waiting for facts: register-then-check, coalescing wakes, fallbacks, grace and cleanup."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.attribution import FactIndex, Resolver, Tier, query_from_watch_object
from pipeline.attribution.resolver import MISROUTE_STREAK
from pipeline.codec.fact_batch import AuthorFact
from pipeline.models import GroupResource
from tests.attribution.helpers import CM, ROUTE, fact, make_index, query, removal
from tests.support.wait import run_ready_tasks, wait_for

GUARD_S = 10.0  # only bounds a hung test; never a timing assertion


async def test_waiter_is_woken_by_a_late_fact_and_leaves_the_registry_empty() -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=60_000)
    task = asyncio.create_task(resolver.resolve(query(uid="u1", rv="1", name="a")))
    await run_ready_tasks()
    assert not task.done()
    assert index.waiter_count() > 0
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.EXACT, "alice")
    assert index.waiter_count() == 0


async def test_fact_applied_between_register_and_lookup_leaves_a_pending_signal() -> None:
    index = make_index()
    q = query(uid="u1", rv="1", name="a")
    waiter = index.register(q)
    try:
        index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
        assert waiter.event.is_set()
    finally:
        index.unregister(waiter)
    assert index.waiter_count() == 0


async def test_one_fact_serves_two_concurrent_waiters_and_a_third_takes_the_fast_path() -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=60_000)
    q = query(uid="u1", rv="1", name="a")
    tasks = [asyncio.create_task(resolver.resolve(q)) for _ in range(2)]
    await run_ready_tasks()
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    results = await asyncio.wait_for(asyncio.gather(*tasks), GUARD_S)
    assert [r.author for r in results] == ["alice", "alice"]
    fast = await Resolver(index, grace_ms=0).resolve(q)
    assert fast.tier == Tier.EXACT
    assert index.waiter_count() == 0


async def test_removal_waits_for_collection_evidence_arriving_later() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    resolver = Resolver(index, grace_ms=60_000)
    task = asyncio.create_task(resolver.resolve(removal(uid="u1", rv="2", name="a")))
    await run_ready_tasks()
    assert not task.done(), "a removal that only found a write keeps waiting"
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u1"])])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_BODY_UID, "admin")


async def test_removal_holding_a_write_does_not_return_before_the_grace() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(removal(uid="u1", rv="2", name="a")))
    await run_ready_tasks()
    assert not task.done(), "a held write fallback must not end the wait"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert index.waiter_count() == 0


async def test_a_removal_without_its_delete_fact_names_nobody_never_the_last_writer() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("finalizer", "patch", name="a", uid="u1", rv="2")])
    found = await asyncio.wait_for(
        Resolver(index, grace_ms=50).resolve(removal(uid="u1", rv="2", name="a")), GUARD_S
    )
    assert (found.tier, found.author) == (Tier.ABSENT, "")
    assert index.waiter_count() == 0


async def test_removals_own_delete_fact_ends_the_wait_at_once() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    resolver = Resolver(index, grace_ms=600_000)
    task = asyncio.create_task(resolver.resolve(removal(uid="u1", rv="2", name="a")))
    await run_ready_tasks()
    index.apply(ROUTE, CM, [fact("deleter", "delete", name="a", uid="u1", rv="2")])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "deleter")


async def test_name_fact_wakes_an_earlier_waiter() -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=600_000)
    task = asyncio.create_task(resolver.resolve(removal(uid="u1", rv="2", name="fl-1")))
    await run_ready_tasks()
    index.apply(ROUTE, CM, [fact("remover", "delete", name="fl-1")])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.NAME, "remover")


async def test_unrelated_fact_wakes_nobody() -> None:
    index = make_index()
    q = query(uid="u1", rv="1", name="a")
    waiter = index.register(q)
    try:
        index.apply(ROUTE, CM, [fact("bob", "create", name="b", uid="u2", rv="2")])
        index.apply("other-route", CM, [fact("eve", "create", name="a", uid="u1", rv="1")])
        assert not waiter.event.is_set()
    finally:
        index.unregister(waiter)


async def test_cancelled_resolution_unregisters() -> None:
    index = make_index()
    task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(removal(uid="u1", name="a")))
    await run_ready_tasks()
    assert index.waiter_count() > 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert index.waiter_count() == 0


async def test_absent_after_grace_and_misroute_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=0)
    caplog.set_level(logging.WARNING, "pipeline.attribution.resolver")
    for i in range(7):
        found = await resolver.resolve(query(route="lost", uid=f"u{i}", rv="1", name="a"))
        assert found.tier == Tier.ABSENT
        assert found.actor_kind == "none"
    warnings = [r for r in caplog.records if "lost" in r.getMessage()]
    assert len(warnings) == 1
    assert "audit_route" in warnings[0].getMessage()
    assert resolver.misroute_warned("lost")


async def test_resolution_metrics_by_tier_and_actor_kind() -> None:
    gr = GroupResource("metrics.test", "widgets")
    index = make_index()
    index.apply(ROUTE, gr, [fact("system:serviceaccount:a:b", "create", name="w", uid="u1", rv="1")])
    labels = {
        "tier": Tier.EXACT,
        "actor_kind": "serviceaccount",
        "group": "metrics.test",
        "version": "",
        "resource": "widgets",
    }
    before = REGISTRY.get_sample_value("reverser_attribution_resolutions_total", labels) or 0
    await Resolver(index, grace_ms=0).resolve(query(uid="u1", rv="1", name="w", gr=gr))
    assert REGISTRY.get_sample_value("reverser_attribution_resolutions_total", labels) == before + 1


@pytest.mark.parametrize("setting", ["grace_ms", "max_wait_ms", "reorder_ms"])
def test_a_negative_wait_setting_is_rejected_naming_it_and_zero_is_allowed(setting: str) -> None:
    waits = {"grace_ms": 0, "max_wait_ms": 0, "reorder_ms": 0}
    with pytest.raises(ValueError, match=setting):
        Resolver(make_index(), **{**waits, setting: -1})
    Resolver(make_index(), **waits)


async def test_misroute_warning_comes_at_the_fifth_unresolved_event_in_a_row(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/attribution.md: five unresolved events in a row on a route that never resolved."""
    resolver = Resolver(make_index(), grace_ms=0)
    caplog.set_level(logging.WARNING, "pipeline.attribution.resolver")
    for i in range(4):
        await resolver.resolve(query(route="quiet", uid=f"u{i}", rv="1"))
    assert not resolver.misroute_warned("quiet"), "warned before the fifth unresolved event"
    assert not [r for r in caplog.records if "quiet" in r.getMessage()]
    await resolver.resolve(query(route="quiet", uid="u4", rv="1"))
    assert resolver.misroute_warned("quiet")
    assert [r.getMessage().split(" events")[0] for r in caplog.records if "quiet" in r.getMessage()] == [
        "attribution: 5"
    ]


async def test_a_route_that_resolved_once_is_never_warned_about() -> None:
    index = make_index()
    index.apply("busy", CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    resolver = Resolver(index, grace_ms=0)
    assert (await resolver.resolve(query(route="busy", uid="u1", rv="1", name="a"))).author == "alice"
    for i in range(2 * MISROUTE_STREAK):
        assert (await resolver.resolve(query(route="busy", uid=f"x{i}", rv="9"))).tier == Tier.ABSENT
    assert not resolver.misroute_warned("busy")
    assert not resolver.misroute_warned("never-seen")


@pytest.mark.parametrize(
    ("filed", "expected"),
    [
        ([fact("deleter", "delete", name="a", uid="u1", rv="2")], (Tier.DELETE_STICKY, "deleter")),
        ([fact("admin", "deletecollection", uids=["u1"])], (Tier.DELETECOLLECTION_BODY_UID, "admin")),
        ([fact("admin", "deletecollection", selector="app=web")], (Tier.DELETECOLLECTION_SCOPE, "admin")),
        ([fact("remover", "delete", name="a")], (Tier.NAME, "remover")),
    ],
)
async def test_a_removal_whose_deletion_evidence_is_filed_settles_without_waiting(
    filed: list[AuthorFact], expected: tuple[Tier, str]
) -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1"), *filed])
    held = removal(uid="u1", rv="2", name="a", labels={"app": "web"})
    task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(held))
    await run_ready_tasks()
    assert task.done(), "deletion evidence already filed must not wait out a 600 s grace"
    assert (task.result().tier, task.result().author) == expected
    assert index.waiter_count() == 0


async def test_a_write_whose_fact_is_filed_settles_without_waiting() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(query(uid="u1", rv="1", name="a")))
    await run_ready_tasks()
    assert task.done(), "a matching fact already filed must not wait out a 600 s grace"
    assert (task.result().tier, task.result().author) == (Tier.EXACT, "alice")


def claim_twice(index: FactIndex, *, stage_us: int = 0) -> None:
    """alice and bob both claim version 2 of u1: its exact slot is a conflict."""
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="2", stage_us=stage_us)])
    index.apply(ROUTE, CM, [fact("bob", "patch", name="a", uid="u1", rv="2", stage_us=stage_us)])


async def test_a_removal_at_a_conflicting_version_waits_for_its_delete_fact() -> None:
    """docs/attribution.md: a removal whose exact slot is in conflict still takes real deletion evidence."""
    index = make_index()
    claim_twice(index)
    task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(removal(uid="u1", rv="2", name="a")))
    await run_ready_tasks()
    assert not task.done(), "a conflict must not end a removal's wait for deletion evidence"
    index.apply(ROUTE, CM, [fact("carol", "delete", name="a", uid="u1")])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "carol")


async def test_a_removal_at_a_conflicting_version_without_deletion_evidence_resolves_to_the_conflict() -> (
    None
):
    index = make_index()
    claim_twice(index)
    found = await Resolver(index, grace_ms=0).resolve(removal(uid="u1", rv="2", name="a"))
    assert (found.tier, found.author) == (Tier.CONFLICT, "")
    assert sorted(c.author for c in found.candidates) == ["alice", "bob"]


async def test_a_conflict_filed_while_a_removal_is_held_is_its_answer_when_audit_time_passes() -> None:
    index = make_index()
    event_ms = index.now_ms()
    resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000)
    task = asyncio.create_task(
        resolver.resolve(removal(uid="u1", rv="2", name="a")._replace(event_ms=event_ms))
    )
    await wait_for(lambda: index.waiter_count() > 0, what="the removal to hold")
    claim_twice(index, stage_us=(event_ms - 1_000) * 1000)
    await run_ready_tasks()
    assert not task.done(), "a conflict must not end a removal's wait while audit time is behind it"
    index.apply(
        ROUTE, CM, [fact("dave", "update", name="b", uid="u9", rv="9", stage_us=(event_ms + 1) * 1000)]
    )
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, sorted(c.author for c in found.candidates)) == (Tier.CONFLICT, ["alice", "bob"])


def holds_expired(route: str) -> float:
    found = REGISTRY.get_sample_value("reverser_attribution_holds_expired_total", {"route": route})
    return found or 0.0


async def test_a_hold_reaching_the_maximum_wait_with_audit_time_behind_is_counted() -> None:
    index = make_index()
    index.apply(
        "late", CM, [fact("old", "update", uid="u0", rv="1", stage_us=(index.now_ms() - 5_000) * 1000)]
    )
    before = holds_expired("late")
    held = query(route="late", uid="u1", rv="7")._replace(event_ms=index.now_ms())
    found = await asyncio.wait_for(Resolver(index, grace_ms=0, max_wait_ms=50).resolve(held), GUARD_S)
    assert found.tier == Tier.ABSENT
    assert holds_expired("late") == before + 1


@pytest.mark.parametrize(("reorder_ms", "mark_past_event_ms"), [(0, 0), (0, 1), (5_000, 5_000)])
async def test_audit_time_reaching_the_event_by_the_allowance_settles_it_uncounted(
    reorder_ms: int, mark_past_event_ms: int
) -> None:
    """ "Passes" means by reorder_ms (default 0 here): a watermark at exactly event + allowance settles."""
    index = make_index()
    route = f"passed-{reorder_ms}-{mark_past_event_ms}"
    event_ms = index.now_ms() - 10_000
    stage_us = (event_ms + mark_past_event_ms) * 1000
    index.apply(route, CM, [fact("other", "update", uid="u9", rv="9", stage_us=stage_us)])
    before = holds_expired(route)
    resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000, reorder_ms=reorder_ms)
    held = query(route=route, uid="u1", rv="7")._replace(event_ms=event_ms)
    task = asyncio.create_task(resolver.resolve(held))
    await run_ready_tasks()
    assert task.done(), "audit time already passed the event: nothing can be gained by holding"
    assert task.result().tier == Tier.ABSENT
    assert holds_expired(route) == before


async def test_without_a_maximum_wait_an_event_ahead_of_audit_time_is_not_a_hold() -> None:
    """max_wait_ms defaults to 0, the grace alone: settling at the grace is not an expired hold."""
    index = make_index()
    before = holds_expired("graceonly")
    held = query(route="graceonly", uid="u1", rv="7")._replace(event_ms=index.now_ms())
    found = await Resolver(index, grace_ms=0).resolve(held)
    assert found.tier == Tier.ABSENT
    assert holds_expired("graceonly") == before


def test_query_from_watch_object() -> None:
    obj = {
        "metadata": {
            "uid": "u1",
            "resourceVersion": "7",
            "namespace": "n",
            "name": "a",
            "labels": {"app": "web"},
        }
    }
    added = query_from_watch_object(ROUTE, CM, "ADDED", obj)
    assert added is not None
    assert added.exact_capable
    assert (added.uid, added.resource_version, added.namespace, added.name) == ("u1", "7", "n", "a")
    assert added.labels == {"app": "web"}
    deleted = query_from_watch_object(ROUTE, CM, "DELETED", obj)
    assert deleted is not None
    assert not deleted.exact_capable
    terminating = {"metadata": {**obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    modified = query_from_watch_object(ROUTE, CM, "MODIFIED", terminating)
    assert modified is not None
    assert not modified.exact_capable
    assert query_from_watch_object(ROUTE, CM, "BOOKMARK", obj) is None
    assert query_from_watch_object(ROUTE, CM, "ERROR", {"code": 410}) is None
    bare = query_from_watch_object(ROUTE, CM, "ADDED", {"metadata": None})
    assert bare is not None
    assert (bare.uid, bare.name) == ("", "")


def wait_count(tier: Tier, event_kind: str) -> float:
    labels = {"tier": tier, "event_kind": event_kind, "group": "", "version": "", "resource": "configmaps"}
    return REGISTRY.get_sample_value("reverser_attribution_resolution_wait_seconds_count", labels) or 0.0


def matched() -> float:
    return REGISTRY.get_sample_value("reverser_attribution_facts_matched_total") or 0.0


async def test_each_resolution_is_timed_as_a_write_or_a_removal_and_only_matches_count_as_matched() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("bob", "delete", name="b", uid="u2", rv="2")])
    resolver = Resolver(index, grace_ms=0)
    before = (wait_count(Tier.EXACT, "write"), wait_count(Tier.DELETE_STICKY, "removal"), matched())
    absent_before = (wait_count(Tier.ABSENT, "write"), wait_count(Tier.ABSENT, "removal"))
    assert (await resolver.resolve(query(uid="u1", rv="1", name="a"))).tier == Tier.EXACT
    assert (await resolver.resolve(removal(uid="u2", rv="3", name="b"))).tier == Tier.DELETE_STICKY
    after = (wait_count(Tier.EXACT, "write"), wait_count(Tier.DELETE_STICKY, "removal"), matched())
    assert after == (before[0] + 1, before[1] + 1, before[2] + 2)
    assert (await resolver.resolve(removal(uid="u3", rv="4", name="c"))).tier == Tier.ABSENT
    assert (await resolver.resolve(query(uid="u3", rv="4", name="c"))).tier == Tier.ABSENT
    assert matched() == before[2] + 2, "an absent resolution matched nothing"
    assert (wait_count(Tier.ABSENT, "write"), wait_count(Tier.ABSENT, "removal")) == (
        absent_before[0] + 1,
        absent_before[1] + 1,
    )


async def test_deletions_that_reach_the_maximum_wait_with_audit_time_behind_are_counted() -> None:
    index = make_index()
    before = holds_expired("snap-late")
    found = await asyncio.wait_for(
        Resolver(index, grace_ms=0, max_wait_ms=50).deletions("snap-late", CM, "shop", index.now_ms()),
        GUARD_S,
    )
    assert found == []
    assert holds_expired("snap-late") == before + 1


@pytest.mark.parametrize(("max_wait_ms", "mark_past_event_ms"), [(600_000, 0), (600_000, 1), (0, -5_000)])
async def test_deletions_settled_by_audit_time_or_by_the_grace_alone_are_not_counted(
    max_wait_ms: int, mark_past_event_ms: int
) -> None:
    index = make_index()
    route = f"snap-{max_wait_ms}-{mark_past_event_ms}"
    event_ms = index.now_ms() - 10_000
    stage_us = (event_ms + mark_past_event_ms) * 1000
    index.apply(route, CM, [fact("bob", "delete", ns="shop", name="a", uid="u-a", rv="2", stage_us=stage_us)])
    before = holds_expired(route)
    resolver = Resolver(index, grace_ms=0, max_wait_ms=max_wait_ms)
    found = await asyncio.wait_for(resolver.deletions(route, CM, "shop", event_ms), GUARD_S)
    assert [(uid, a.tier, a.author) for uid, _ns, _name, a in found] == [("u-a", Tier.DELETE_STICKY, "bob")]
    assert holds_expired(route) == before


async def test_deletions_wait_out_the_grace_for_evidence_filed_during_it() -> None:
    index = make_index()
    snapshot_ms = index.now_ms() - 60_000
    task = asyncio.create_task(Resolver(index, grace_ms=1000).deletions(ROUTE, CM, "shop", snapshot_ms))
    await run_ready_tasks()
    assert not task.done(), "answered before the grace ended"
    # Facts with a stage time advance the route's watermark, which wakes the waiting deletions.
    stage_us = (index.now_ms() - 1_000) * 1000
    index.apply(ROUTE, CM, [fact("bob", "delete", ns="shop", name="a", uid="u-a", rv="2", stage_us=stage_us)])
    await run_ready_tasks()
    assert not task.done(), "a fact filed during the grace must not end it early"
    index.apply(
        ROUTE, CM, [fact("carol", "delete", ns="shop", name="b", uid="u-b", rv="3", stage_us=stage_us)]
    )
    found = await asyncio.wait_for(task, GUARD_S)
    assert sorted((uid, a.author) for uid, _ns, _name, a in found) == [("u-a", "bob"), ("u-b", "carol")]


class SteppedLoop(asyncio.SelectorEventLoop):
    """A simulated clock: timers fire when the test moves `now`, never by waiting.

    Only for coroutines that never block on I/O (the loop would then sleep in real time until
    the next simulated timer).
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


def run_stepped(test: Callable[[SteppedLoop], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=SteppedLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, SteppedLoop)
        runner.run(test(loop))


def test_the_grace_ends_at_grace_ms_in_seconds() -> None:
    async def scenario(loop: SteppedLoop) -> None:
        index = make_index()
        task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(query(uid="u1", rv="1")))
        await run_ready_tasks()
        loop.now = 599.7
        await run_ready_tasks()
        assert not task.done(), "ended before the 600 s grace"
        loop.now = 600.3
        await run_ready_tasks()
        assert task.done(), "still waiting after the 600 s grace"
        assert task.result().tier == Tier.ABSENT

    run_stepped(scenario)


def test_a_hold_ends_at_max_wait_ms_in_seconds() -> None:
    async def scenario(loop: SteppedLoop) -> None:
        index = make_index()
        resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000)
        task = asyncio.create_task(
            resolver.resolve(query(uid="u1", rv="1")._replace(event_ms=index.now_ms()))
        )
        await run_ready_tasks()
        loop.now = 599.7
        await run_ready_tasks()
        assert not task.done(), "ended before the 600 s maximum wait"
        loop.now = 600.3
        await run_ready_tasks()
        assert task.done(), "still held after the 600 s maximum wait"
        assert task.result().tier == Tier.ABSENT

    run_stepped(scenario)
