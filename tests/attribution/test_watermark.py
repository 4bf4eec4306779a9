"""The audit watermark: its pure core, and a late audit batch that still names the author."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given
from hypothesis import strategies as st

from pipeline.attribution import Attribution, FactFollower, FactIndex, Resolver, Tier
from pipeline.attribution.watermark import Watermarks, hold_s
from pipeline.codec.fact_batch import FactBatch
from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames
from tests.attribution.helpers import CM, ROUTE, fact, make_index, query, removal
from tests.attribution.test_follower import create_fact_topic, record_for
from tests.support.wait import run_ready_tasks, wait_for

GUARD_S = 60.0
seconds = st.floats(min_value=0, max_value=1000, allow_nan=False)
times = st.integers(min_value=0, max_value=10**13)


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), times)))
def test_the_watermark_is_the_newest_event_time_per_route_and_never_goes_back(
    observed: list[tuple[str, int]],
) -> None:
    marks = Watermarks()
    for route, at in observed:
        before = marks.of(route)
        assert marks.advance(route, at) == (at > before)
        assert marks.of(route) == max(before, at)
    for route in ("a", "b"):
        assert marks.of(route) == max((at for r, at in observed if r == route), default=0)
        assert marks.passed(route, marks.of(route))


@given(
    waited=seconds,
    grace=seconds,
    max_wait=seconds,
    event=times,
    mark=times,
    reorder=st.integers(min_value=0, max_value=60_000),
)
def test_the_hold_never_ends_before_the_grace_nor_after_the_maximum_wait(
    waited: float, grace: float, max_wait: float, event: int, mark: int, reorder: int
) -> None:
    left = hold_s(waited, grace, max_wait, event, mark, reorder)
    limit = max(grace, max_wait)
    assert 0 <= left <= max(0.0, limit - waited)
    if waited < grace:
        assert left == grace - waited, "the grace is always waited out"
    if waited >= limit:
        assert left == 0
    if waited >= grace and (event == 0 or mark >= event + reorder):
        assert left == 0, "once audit time passed the event by the allowance nothing is gained"
    if grace <= waited < limit and event > 0 and mark < event + reorder:
        assert left == limit - waited, "audit may still be behind the event: hold until the maximum wait"


async def held_with_reorder_allowance(
    index: FactIndex, reorder_ms: int
) -> tuple[asyncio.Task[Attribution], int]:
    """A resolution of an event 10 s old, held because no audit time has passed it yet."""
    resolver = Resolver(index, grace_ms=0, max_wait_ms=int(GUARD_S * 1000), reorder_ms=reorder_ms)
    event_ms = index.now_ms() - 10_000
    task = asyncio.create_task(
        resolver.resolve(query(uid="u1", rv="7", name="web")._replace(event_ms=event_ms))
    )
    await wait_for(lambda: index.waiter_count() > 0, what="the resolution to hold")
    return task, event_ms


async def test_a_batch_overtaken_by_a_newer_one_still_names_the_author_within_the_reorder_allowance() -> None:
    """A paused replica answers its batch after another replica stored a newer one."""
    index = make_index()
    task, event_ms = await held_with_reorder_allowance(index, reorder_ms=5_000)
    # The newer batch: audit time has passed the event, but by less than the allowance.
    index.apply(ROUTE, CM, [fact("bob", uid="u9", rv="9", stage_us=(event_ms + 4_000) * 1000)])
    await run_ready_tasks()  # the woken resolution looks again and keeps holding
    assert not task.done(), "settled although an overtaken batch could still come"
    index.apply(
        ROUTE, CM, [fact("alice", "update", uid="u1", rv="7", name="web", stage_us=(event_ms - 20) * 1000)]
    )
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.EXACT, "alice")


async def test_audit_time_past_the_event_by_the_allowance_settles_at_once() -> None:
    index = make_index()
    task, event_ms = await held_with_reorder_allowance(index, reorder_ms=5_000)
    index.apply(ROUTE, CM, [fact("bob", uid="u9", rv="9", stage_us=(event_ms + 5_000) * 1000)])
    found = await asyncio.wait_for(task, GUARD_S)
    assert found.tier == Tier.ABSENT


def test_a_future_stage_time_moves_the_watermark_only_to_now() -> None:
    index = make_index()
    now = index.now_ms()
    index.apply(ROUTE, CM, [fact("alice", uid="u1", rv="1", stage_us=(now + 3_600_000) * 1000)])
    assert index.watermark(ROUTE) == now
    assert index.watermark("other") == 0


async def test_audit_time_passing_the_event_settles_without_the_maximum_wait() -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000)
    event_ms = index.now_ms()
    held = query(uid="u1", rv="1", name="a")._replace(event_ms=event_ms)
    task = asyncio.create_task(resolver.resolve(held))
    await wait_for(lambda: index.waiter_count() > 0, what="the resolution to hold")
    assert not task.done()
    # A fact of another object, made after the event: audit time has passed it, nothing came for it.
    index.apply(ROUTE, CM, [fact("bob", uid="u9", rv="9", stage_us=(event_ms + 1) * 1000)])
    found = await asyncio.wait_for(task, GUARD_S)
    assert found.tier == Tier.ABSENT
    assert index.waiter_count() == 0


async def test_facts_arriving_after_the_grace_but_within_the_maximum_wait_still_name_the_author(
    any_log: Log, settings: Settings
) -> None:
    """The apiserver retried its batch after an outage: it lands well after the grace."""
    topic = await create_fact_topic(any_log, settings)
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(
        any_log, TopicNames.for_prefix(settings.log.topic_prefix), index, settings, fetch_timeout_ms=100
    )
    await follower.start()
    try:
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        before_ms = int(time.time() * 1000) - 5_000
        # Audit progress from before the outage: the watermark trails the watch event.
        await any_log.append_many(
            topic,
            [
                record_for(
                    FactBatch(
                        ROUTE, CM, [fact("carol", uid="u0", rv="5", name="old", stage_us=before_ms * 1000)]
                    )
                )
            ],
        )
        await wait_for(lambda: index.watermark(ROUTE) == before_ms, what="the old fact", timeout_s=GUARD_S)
        grace_ms = 100
        resolver = Resolver(index, grace_ms=grace_ms, max_wait_ms=int(GUARD_S * 1000))
        event_ms = int(time.time() * 1000)
        started = time.monotonic()
        task = asyncio.create_task(
            resolver.resolve(query(uid="u1", rv="7", name="web")._replace(event_ms=event_ms))
        )
        await wait_for(lambda: time.monotonic() - started > 3 * grace_ms / 1000, what="the grace to pass")
        assert not task.done(), "settled at the grace although audit time had not reached the event"
        # The retried batch arrives: the event's own fact, stamped just before the watch saw it.
        await any_log.append_many(
            topic,
            [
                record_for(
                    FactBatch(
                        ROUTE,
                        CM,
                        [
                            fact(
                                "alice",
                                "update",
                                uid="u1",
                                rv="7",
                                name="web",
                                stage_us=(event_ms - 20) * 1000,
                            )
                        ],
                    )
                )
            ],
        )
        found = await asyncio.wait_for(task, GUARD_S)
        assert (found.tier, found.author) == (Tier.EXACT, "alice")
    finally:
        await follower.stop()


async def test_without_a_maximum_wait_the_grace_alone_decides_as_before() -> None:
    index = make_index()
    held = query(uid="u1", rv="1")._replace(event_ms=index.now_ms())
    found = await Resolver(index, grace_ms=0).resolve(held)
    assert found.tier == Tier.ABSENT


async def test_a_late_delete_fact_is_waited_for_and_the_last_writer_is_never_credited() -> None:
    """The chaos finding: a finalizer held the object while the delete's audit batch was late.

    The removal is held past the grace (audit time is behind the event) and named by the delete
    fact when it arrives, not by bob, who wrote the object last.
    """
    index = make_index()
    event_ms = index.now_ms()
    bob = fact("bob", "update", name="a", uid="u1", rv="1", stage_us=(event_ms - 5_000) * 1000)
    index.apply(ROUTE, CM, [bob])
    resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000)
    held = removal(uid="u1", rv="2", name="a")._replace(event_ms=event_ms)
    task = asyncio.create_task(resolver.resolve(held))
    await wait_for(lambda: index.waiter_count() > 0, what="the removal to hold")
    assert not task.done(), "settled although audit time had not reached the delete"
    carol = fact("carol", "delete", name="a", uid="u1", rv="2", stage_us=(event_ms - 10) * 1000)
    index.apply(ROUTE, CM, [carol])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "carol")


async def test_a_removal_whose_delete_fact_never_comes_is_unknown_once_audit_time_passes_it() -> None:
    index = make_index()
    event_ms = index.now_ms()
    bob = fact("bob", "update", name="a", uid="u1", rv="1", stage_us=(event_ms - 5_000) * 1000)
    index.apply(ROUTE, CM, [bob])
    resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000)
    held = removal(uid="u1", rv="2", name="a")._replace(event_ms=event_ms)
    task = asyncio.create_task(resolver.resolve(held))
    await wait_for(lambda: index.waiter_count() > 0, what="the removal to hold")
    assert not task.done()
    # bob writes another object after the delete: audit time passed it, and no delete fact came
    later = fact("bob", "update", name="b", uid="u2", rv="3", stage_us=(event_ms + 1) * 1000)
    index.apply(ROUTE, CM, [later])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.ABSENT, "")
