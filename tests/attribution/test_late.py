"""Late facts (`pipeline.attribution.late`): which answers may name a change after its hold.

Against the reference model: a late answer is exactly the model's answer when the model names the
change itself (exact slot, the object's own deletion evidence), and nothing otherwise; and the
waiting lookup wakes on the fact that comes after it started.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.attribution import FactQuery, Tier
from pipeline.attribution.late import LATE_NAME_MARGIN_MS, LATE_TIERS, await_late, names_late
from pipeline.attribution.model import Attribution, Identity, StoredFact
from pipeline.models import GroupResource
from tests.attribution.helpers import Clock, fact, make_index
from tests.attribution.test_properties import expected, operations, queries, run
from tests.support.wait import run_ready_tasks

CM = GroupResource("", "configmaps")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, probes=st.lists(queries, min_size=1, max_size=16))
def test_a_late_answer_is_the_models_answer_when_it_pins_the_change(
    ops: list[tuple[Any, ...]], probes: list[FactQuery]
) -> None:
    index, oracle, clock = run(ops, per_type=10_000, total=100_000)
    for q in probes:
        tier, author = expected(oracle, q, clock.ms)
        got = index.lookup(q)
        pins = bool(author) and tier in LATE_TIERS
        assert names_late(got, q) == pins, (q, tier)
        if pins:
            assert got.author == author


def test_name_resource_version_and_scope_tiers_never_name_a_change_late() -> None:
    assert LATE_TIERS.isdisjoint(
        {Tier.NAME, Tier.RESOURCE_VERSION, Tier.DELETECOLLECTION_SCOPE, Tier.CONFLICT, Tier.ABSENT}
    )


def query(uid: str = "u1", rv: str = "7", *, exact_capable: bool = True) -> FactQuery:
    return FactQuery("r", CM, uid, rv, "ns-1", "a", {}, exact_capable)


async def test_the_late_lookup_wakes_on_the_fact_filed_after_it_started() -> None:
    clock = Clock()
    index = make_index(clock)
    waiting = asyncio.create_task(await_late(index, query(), window_s=30))
    await asyncio.sleep(0)
    index.apply("r", CM, [fact("mallory", "update", ns="ns-1", name="a")], clock.ms)  # by name: not enough
    await asyncio.sleep(0)
    assert not waiting.done()
    index.apply("r", CM, [fact("alice", "update", ns="ns-1", name="a", uid="u1", rv="7")], clock.ms)
    found = await asyncio.wait_for(waiting, 30)
    assert found is not None
    assert (found.tier, found.author) == (Tier.EXACT, "alice")
    assert index.waiter_count() == 0, "the waiter is unregistered"


async def test_no_pinning_fact_within_the_window_is_none() -> None:
    index = make_index(Clock())
    index.apply("r", CM, [fact("mallory", "update", ns="ns-1", name="a")], Clock().ms)
    assert await await_late(index, query(), window_s=0) is None
    assert index.waiter_count() == 0


def test_a_delete_answered_by_name_counts_late_only_if_made_before_the_removal_was_seen() -> None:
    """A plain delete's audit event often has no uid; a later incarnation's delete is stamped later."""
    clock = Clock()
    index = make_index(clock)
    seen_ms = clock.ms - 10_000
    removal = FactQuery("r", CM, "u1", "8", "ns-1", "a", {}, False, event_ms=seen_ms)
    index.apply(
        "r", CM, [fact("bob", "delete", ns="ns-1", name="a", stage_us=(seen_ms - 100) * 1000)], clock.ms
    )
    found = index.lookup(removal)
    assert (found.tier, found.author) == (Tier.NAME, "bob")
    assert names_late(found, removal)
    later = make_index(clock)
    stamp_us = (seen_ms + LATE_NAME_MARGIN_MS + 1) * 1000
    later.apply("r", CM, [fact("mallory", "delete", ns="ns-1", name="a", stage_us=stamp_us)], clock.ms)
    assert later.lookup(removal).tier == Tier.NAME, "the index answers by name; only the late rule refuses"
    assert not names_late(later.lookup(removal), removal), "a delete made after the removal is another one"
    write = FactQuery("r", CM, "u1", "8", "ns-1", "a", {}, True, event_ms=seen_ms)
    index.apply(
        "r", CM, [fact("bob", "update", ns="ns-1", name="a", stage_us=(seen_ms - 100) * 1000)], clock.ms
    )
    assert not names_late(index.lookup(write), write), "a write is named late only by its exact slot"


def by_name(stage_ms: int) -> Attribution:
    """A delete fact answered by name, stamped `stage_ms` (the apiserver's clock)."""
    identity = Identity("bob", "bob", "")
    return Attribution(Tier.NAME, StoredFact(identity, "delete", "a1", "ns-1", "a", "", "", 1, stage_ms))


def removal_seen_at(event_ms: int) -> FactQuery:
    return FactQuery("r", CM, "u1", "8", "ns-1", "a", {}, False, event_ms=event_ms)


SEEN_MS = 1_700_000_000_000


@pytest.mark.parametrize(
    ("event_ms", "stage_ms", "named"),
    [
        (SEEN_MS, SEEN_MS + LATE_NAME_MARGIN_MS, True),  # the margin's last millisecond still counts
        (SEEN_MS, SEEN_MS + LATE_NAME_MARGIN_MS + 1, False),  # one past it is a later delete
        (SEEN_MS, SEEN_MS - 5_000, True),
        (SEEN_MS, 1, True),  # any stamp before the removal was seen
        (SEEN_MS, 0, False),  # no stageTimestamp: nothing says when the delete was made
        (0, 1_000, False),  # the removal's time is unknown: a name cannot pin it
        (1, 1_000, True),  # a known removal time, however early, is compared
    ],
)
def test_a_delete_by_name_is_named_late_exactly_inside_the_margin(
    event_ms: int, stage_ms: int, named: bool
) -> None:
    assert names_late(by_name(stage_ms), removal_seen_at(event_ms)) is named


def test_the_margin_is_the_two_seconds_the_docs_promise() -> None:
    """docs/attribution.md states the margin ("plus 2 s"); the tests above follow the constant, so
    this one pins its value: a change of it is a change of documented behaviour."""
    assert LATE_NAME_MARGIN_MS == 2_000
    assert names_late(by_name(SEEN_MS + 2_000), removal_seen_at(SEEN_MS))
    assert not names_late(by_name(SEEN_MS + 2_001), removal_seen_at(SEEN_MS))


def test_a_write_or_a_conflict_is_never_named_late_by_name() -> None:
    write = FactQuery("r", CM, "u1", "8", "ns-1", "a", {}, True, event_ms=SEEN_MS)
    assert not names_late(by_name(SEEN_MS - 1), write)
    assert not names_late(Attribution(Tier.CONFLICT, None), removal_seen_at(SEEN_MS))


async def test_a_fact_within_a_short_window_is_still_awaited() -> None:
    """A window under a second is waited out, not given up at once."""
    clock = Clock()
    index = make_index(clock)
    waiting = asyncio.create_task(await_late(index, query(), window_s=0.5))
    await run_ready_tasks()
    assert not waiting.done()
    index.apply("r", CM, [fact("alice", "update", ns="ns-1", name="a", uid="u1", rv="7")], clock.ms)
    found = await asyncio.wait_for(waiting, 30)
    assert found is not None
    assert found.author == "alice"
