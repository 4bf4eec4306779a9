"""The `scale` tier: a scale's admission fact names the version it makes (pipeline.content.scale).

A Scale review carries the parent's uid, its resourceVersion before the write and the new replica
count; the router knows an event's version, its spec.replicas and the object's previous version it
mirrored. Versions in between changed nothing mirrored (status), so the scale of the event's count
that started from a version in [previous, event) made it. Successive scales of one Deployment each
name their own version; two users' scales in one range to one count are a conflict, never a guess.
"""

from __future__ import annotations

import asyncio
import random

from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.attribution import FactQuery, Resolver, Tier
from pipeline.codec.fact_batch import AuthorFact
from pipeline.content.key import content_key
from pipeline.content.scale import is_scale_key, scale_key
from tests.attribution.helpers import DEPLOY, ROUTE, Clock, fact, make_index, query, removal

USERS = ("alice", "bob", "carol")


def scaled(rv: str, previous: str, replicas: int, uid: str = "d1", content: str = "") -> FactQuery:
    """The query of a Deployment event whose previous mirrored version was `previous`."""
    return query(uid=uid, rv=rv, name="web", gr=DEPLOY)._replace(
        previous_rv=previous, replicas=replicas, content_key=content
    )


def scale_fact(author: str, previous: str, replicas: int, uid: str = "d1") -> list[AuthorFact]:
    return [fact(author, "update", name="web", uid=uid, rv=scale_key(previous, replicas))]


def test_successive_scales_of_one_deployment_each_name_their_own_author() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "11", 3))
    index.apply(ROUTE, DEPLOY, scale_fact("carol", "12", 5))
    for rv, previous, replicas, author in (
        ("11", "10", 2, "alice"),
        ("12", "11", 3, "bob"),
        ("13", "12", 5, "carol"),
    ):
        found = index.lookup(scaled(rv, previous, replicas))
        assert (found.tier, found.author) == (Tier.SCALE, author)


def test_a_scale_fact_names_no_other_version_object_or_kind_of_event() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    assert index.lookup(scaled("12", "11", 2)).tier == Tier.ABSENT, "made from another version"
    assert index.lookup(scaled("11", "10", 3)).tier == Tier.ABSENT, "another replica count"
    assert index.lookup(scaled("11", "10", 2, uid="d2")).tier == Tier.ABSENT, "another Deployment"
    assert index.lookup(scaled("11", "", 2)).tier == Tier.ABSENT, "predecessor unknown: no key"
    assert index.lookup(removal(uid="d1", rv="11", name="web", gr=DEPLOY)).tier == Tier.ABSENT
    # the scale key of a write's query is never answered by a delete fact in its slot
    index.apply(ROUTE, DEPLOY, [fact("bob", "delete", name="web", uid="d3", rv=scale_key("10", 2))])
    assert index.lookup(scaled("11", "10", 2, uid="d3")).tier == Tier.ABSENT


def test_a_scale_that_started_after_status_writes_still_names_the_next_mirrored_version() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "14", 2))  # 11..14 were status writes
    found = index.lookup(scaled("15", "10", 2))
    assert (found.tier, found.author) == (Tier.SCALE, "alice")
    assert index.lookup(scaled("15", "10", 2)._replace(replicas=-1)).tier == Tier.ABSENT, "no count"
    assert index.lookup(scaled("15", "x9", 2)).tier == Tier.ABSENT, "versions that do not compare"
    assert index.lookup(scaled("y15", "10", 2)).tier == Tier.ABSENT
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "12", 2))  # another user's scale in the range
    found = index.lookup(scaled("15", "10", 2))
    assert found.tier == Tier.CONFLICT
    assert {c.identity.author for c in found.candidates} == {"alice", "bob"}
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "13", 2))
    assert index.lookup(scaled("15", "10", 2)).tier == Tier.CONFLICT, "however many of one user"


def test_the_newest_of_one_users_scales_in_the_range_answers() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, [fact("alice", "update", name="web", uid="d1", rv=scale_key("12", 2))])
    index.apply(
        ROUTE,
        DEPLOY,
        [
            AuthorFact(
                "alice", audit_id="newest", verb="update", uid="d1", resource_version=scale_key("13", 2)
            )
        ],
    )
    index.apply(
        ROUTE,
        DEPLOY,
        [
            AuthorFact(
                "alice", audit_id="oldest", verb="update", uid="d1", resource_version=scale_key("11", 2)
            )
        ],
    )
    found = index.lookup(scaled("15", "11", 2))
    assert found.fact is not None
    assert found.fact.audit_id == "newest"


def test_a_scale_key_whose_slot_is_gone_is_dropped() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    clock.now += 61
    index.sweep()
    assert index.lookup(scaled("11", "10", 2)).tier == Tier.ABSENT
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "20", 3))
    assert index.lookup(scaled("21", "20", 3)).author == "bob"
    assert len(index) == 2, "bob's exact and latest entries; alice's key went with her slot"


def test_two_users_claiming_one_scale_key_is_a_conflict() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))  # a retry
    assert index.lookup(scaled("11", "10", 2)).author == "alice"
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "10", 2))
    found = index.lookup(scaled("11", "10", 2))
    assert found.tier == Tier.CONFLICT
    assert {c.identity.author for c in found.candidates} == {"alice", "bob"}


def test_the_content_key_outranks_the_scale_key_and_audit_must_agree_with_either() -> None:
    key = content_key(b'{"spec":{"replicas":2}}')
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    index.apply(ROUTE, DEPLOY, [fact("bob", "update", name="web", uid="d1", rv=key)])
    found = index.lookup(scaled("11", "10", 2, content=key))
    assert (found.tier, found.author) == (Tier.ADMISSION, "bob")
    assert index.lookup(scaled("11", "10", 2)).author == "alice"
    index.apply(ROUTE, DEPLOY, [fact("carol", "update", name="web", uid="d1", rv="11")])  # audit
    found = index.lookup(scaled("11", "10", 2))
    assert found.tier == Tier.CONFLICT, "audit says carol, the scale fact says alice"
    index.apply(ROUTE, DEPLOY, [fact("alice", "update", name="web", uid="d1", rv="21")])
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "20", 4))
    assert index.lookup(scaled("21", "20", 4)).tier == Tier.EXACT


def test_a_conflicting_scale_slot_answers_conflict_even_when_a_content_fact_is_absent() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "10", 2))
    other = content_key(b"{}")
    assert index.lookup(scaled("11", "10", 2, content=other)).tier == Tier.CONFLICT


def test_a_scale_fact_ages_out_with_the_ttl() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    clock.now += 61
    assert index.lookup(scaled("11", "10", 2)).tier == Tier.ABSENT


def test_a_scale_fact_arriving_during_the_grace_wakes_the_resolution() -> None:
    async def scenario() -> None:
        index = make_index(Clock())
        resolver = Resolver(index, grace_ms=5000)
        pending = asyncio.ensure_future(resolver.resolve(scaled("11", "10", 2)))
        await asyncio.sleep(0.05)
        assert not pending.done()
        index.apply(ROUTE, DEPLOY, scale_fact("bob", "10", 2))
        found = await asyncio.wait_for(pending, 1.0)
        assert (found.tier, found.author) == (Tier.SCALE, "bob")

    asyncio.run(scenario())


# A write of the model: (writer, "scale", "update" or "status", new replica count, fact arrived).
Write = tuple[str, str, int, bool]


@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(USERS),
            st.sampled_from(["scale", "update", "status"]),
            st.integers(1, 4),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    failed=st.lists(st.tuples(st.sampled_from(USERS), st.integers(0, 11), st.integers(1, 4)), max_size=3),
    order=st.randoms(use_true_random=False),
)
def test_each_scale_names_its_own_author_or_nobody_never_another_user(
    writes: list[tuple[str, str, int, bool]], failed: list[tuple[str, int, int]], order: random.Random
) -> None:
    """Model: one Deployment's versions 100, 101, ... each made by one write: a scale (its fact
    names the version it started from and its count), a spec update (its content fact is not in
    play: the scale tier is what is tested) or a status write (not mirrored: no event). Some facts
    never arrive; `failed` adds facts of scale attempts that lost the race for a version (one whose
    count the next mirrored version has is the documented failure mode, left out). Facts arrive in
    any order. Every event then resolves to its own writer, a conflict or nobody; to its own writer
    whenever that writer's fact arrived and no other user's fact is in its range with its count; a
    spec update never gets a scale fact's author.
    """
    rv, replicas, mirrored = 100, 1, "100"
    events: list[tuple[str, str, int, str, str]] = []  # (rv, previous mirrored, replicas, writer, how)
    facts: list[tuple[str, int, int]] = []  # (author, started from, count)
    for writer, how, count, arrived in writes:
        if how == "scale" and count == replicas:
            continue  # a scale to the count it has stores nothing
        if how == "status":
            rv += 1
            continue
        events.append((str(rv + 1), mirrored, count, writer, how))
        if how == "scale" and arrived:
            facts.append((writer, rv, count))
        rv, replicas, mirrored = rv + 1, count, str(rv + 1)

    def in_range(event: tuple[str, str, int, str, str], started: int, count: int) -> bool:
        return int(event[1]) <= started < int(event[0]) and count == event[2]

    for user, offset, count in failed:
        if not any(in_range(event, 100 + offset, count) for event in events):
            facts.append((user, 100 + offset, count))
    order.shuffle(facts)
    index = make_index()
    for author, started, count in facts:
        index.apply(ROUTE, DEPLOY, scale_fact(author, str(started), count))
    for event in events:
        event_rv, previous, count, writer, how = event
        found = index.lookup(scaled(event_rv, previous, count))
        claimants = {author for author, started, c in facts if in_range(event, started, c)}
        if how == "update":
            assert found.tier == Tier.ABSENT, "a spec update got a scale fact's answer"
        elif claimants == {writer}:
            assert (found.tier, found.author) == (Tier.SCALE, writer)
        elif len(claimants) > 1:
            assert found.tier == Tier.CONFLICT
        else:
            assert found.tier == Tier.ABSENT


def test_a_scale_to_zero_replicas_is_named() -> None:
    # zero is a count like any other (a Deployment scaled down to nothing); only a missing count is not
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("carol", "20", 0))
    found = index.lookup(scaled("21", "20", 0))
    assert (found.tier, found.author) == (Tier.SCALE, "carol")


def test_a_scale_fact_answers_until_the_end_of_its_ttl() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    clock.now += 60  # exactly the TTL: still held
    found = index.lookup(scaled("11", "10", 2))
    assert (found.tier, found.author) == (Tier.SCALE, "alice")


def test_a_scale_conflict_lasts_as_long_as_its_newest_claim() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 2))
    clock.now += 30
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "10", 2))
    clock.now += 60  # alice's claim is past the TTL, bob's is at its very end
    index.sweep()
    found = index.lookup(scaled("11", "10", 2))
    assert found.tier == Tier.CONFLICT, "the slot two users claimed never answers with one of them"
    assert {c.identity.author for c in found.candidates} == {"alice", "bob"}


def caught(rv: str, previous: str, replicas: int, uid: str = "d1") -> FactQuery:
    """The query of a Deployment the snapshot after a watch gap shows changed only in its count."""
    return scaled(rv, previous, replicas, uid)._replace(caught_up=True)


def count_update(author: str, replicas: int, uid: str = "d1") -> list[AuthorFact]:
    """The content fact of an update that set the count through the Deployment itself."""
    return [fact(author, "update", name="web", uid=uid, rv=content_key(b"%d" % replicas))]


def test_a_gap_of_one_users_scales_names_the_last_of_them() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 3))
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "12", 5))
    found = index.lookup(caught("20", "10", 5))
    assert (found.tier, found.author) == (Tier.SCALE, "alice")


def test_a_gap_whose_count_changed_again_after_the_scale_is_unknown() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "12", 3))  # then back to 5 by a write with no fact
    assert index.lookup(caught("20", "10", 5)).tier == Tier.ABSENT
    assert index.lookup(scaled("20", "10", 5)).author == "alice", "a live range holds one write: named"
    other = make_index()
    other.apply(ROUTE, DEPLOY, scale_fact("bob", "9", 3))  # before the range
    other.apply(ROUTE, DEPLOY, scale_fact("carol", "20", 3))  # from the snapshot's version: after it
    other.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
    assert other.lookup(caught("20", "10", 5)).author == "alice", "only the range's scales count"


def test_a_later_fact_of_another_count_counts_only_while_its_slot_is_held() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, DEPLOY, scale_fact("bob", "12", 3))
    clock.now += 30
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
    index.apply(ROUTE, DEPLOY, count_update("alice", 5, uid="d9"))  # (another object's fact)
    assert index.lookup(caught("20", "10", 5)).tier == Tier.ABSENT
    clock.now += 31  # bob's fact is gone with its TTL
    assert index.lookup(caught("20", "10", 5)).author == "alice"
    index.apply(ROUTE, DEPLOY, scale_fact("carol", "13", 3))
    index.apply(ROUTE, DEPLOY, scale_fact("dave", "13", 3))  # two users claim that slot
    assert index.lookup(caught("20", "10", 5)).tier == Tier.ABSENT, "a claimed slot is a later write too"


def test_a_later_fact_of_the_object_refuses_a_gap_scale() -> None:
    index = make_index()
    index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
    index.apply(ROUTE, DEPLOY, count_update("bob", 4))
    found = index.lookup(caught("20", "10", 5))
    assert found.tier == Tier.CONFLICT
    assert [c.identity.author for c in found.candidates] == ["bob", "alice"]
    assert index.lookup(scaled("20", "10", 5)).author == "alice", "a live range: named"
    same = make_index()
    same.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
    same.apply(ROUTE, DEPLOY, count_update("alice", 4))  # the count changed after the scale
    assert same.lookup(caught("20", "10", 5)).tier == Tier.ABSENT
    same.apply(ROUTE, DEPLOY, scale_fact("alice", "11", 5))  # and alice set it back: the newest
    assert same.lookup(caught("20", "10", 5)).author == "alice"


def test_a_caught_up_scale_answer_is_held_and_a_later_fact_still_refuses_it() -> None:
    async def scenario() -> None:
        clock = Clock()
        index = make_index(clock)
        resolver = Resolver(index, grace_ms=300)
        index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
        pending = asyncio.ensure_future(resolver.resolve(caught("20", "10", 5)))
        await asyncio.sleep(0.05)
        assert not pending.done(), "a live range would have answered at once"
        index.apply(ROUTE, DEPLOY, count_update("bob", 4))
        found = await asyncio.wait_for(pending, 2.0)
        assert found.tier == Tier.CONFLICT
        held = await resolver.resolve(caught("20", "10", 4, uid="d1")._replace(replicas=5, uid="d2"))
        assert held.tier == Tier.ABSENT
        index.apply(ROUTE, DEPLOY, scale_fact("carol", "30", 6, uid="d2"))
        found = await asyncio.wait_for(resolver.resolve(caught("40", "30", 6, uid="d2")), 2.0)
        assert (found.tier, found.author) == (Tier.SCALE, "carol"), "held, then given"

    asyncio.run(scenario())


@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(USERS),
            st.sampled_from(("scale", "update", "status")),
            st.integers(1, 4),
            st.booleans(),
        ),
        min_size=1,
        max_size=10,
    ),
    stale=st.lists(st.tuples(st.sampled_from(USERS), st.integers(1, 4)), max_size=2),
    swaps=st.lists(st.booleans(), max_size=10),
)
@example(  # bob's scale fact is filed before alice's, though his scale came after hers
    writes=[("alice", "scale", 3, True), ("bob", "scale", 2, True), ("carol", "scale", 3, False)],
    stale=[],
    swaps=[True],
)
def test_a_gap_scale_names_the_last_writer_unless_two_later_facts_were_lost(
    writes: list[tuple[str, str, int, bool]], stale: list[tuple[str, int]], swaps: list[bool]
) -> None:
    """Model: one Deployment mirrored at version 100 with 1 replica, then a watch gap in which only
    its count changes: scales (facts name their start and count), updates of the count through the
    Deployment (content facts) and status writes; some facts are lost, the rest are filed in the
    order of the writes except that two successive scale facts may swap (`swaps`: replicas append
    them independently), after `stale` facts of scales from before the gap. The snapshot shows the
    last version. Whenever the scale tier names someone, it is the last writer, or at least two
    writes after the named one lost their facts (the documented failure mode); a conflict or
    nobody is always allowed. Writes that change nothing make no version and no fact.
    """
    index = make_index()
    for user, count in stale:
        index.apply(ROUTE, DEPLOY, scale_fact(user, "99", count))
    rv, replicas = 100, 1
    made: list[tuple[str, bool]] = []  # (writer, its fact was filed) of each version in the gap
    filed: list[list[AuthorFact]] = []
    for writer, how, count, arrived in writes:
        if how == "status":
            rv += 1
            continue
        if count == replicas:
            continue  # nothing changes: no version, no fact
        if arrived:
            filed.append(
                scale_fact(writer, str(rv), count) if how == "scale" else count_update(writer, count)
            )
        made.append((writer, arrived))
        rv, replicas = rv + 1, count
    for at, swap in enumerate(swaps[: max(len(filed) - 1, 0)]):
        if swap and all(is_scale_key(f[0].resource_version) for f in filed[at : at + 2]):
            filed[at], filed[at + 1] = filed[at + 1], filed[at]
    for facts in filed:
        index.apply(ROUTE, DEPLOY, facts)
    if not made:
        return
    found = index.lookup(caught(str(rv + 1), "100", replicas))
    if found.tier != Tier.SCALE:
        assert found.tier in (Tier.ABSENT, Tier.CONFLICT)
        return
    named = max(i for i, (writer, arrived) in enumerate(made) if writer == found.author and arrived)
    if found.author != made[-1][0]:
        after = made[named + 1 :]
        assert len(after) >= 2, (made, found.author)
        assert not any(arrived for _, arrived in after), (made, found.author)


def test_only_a_caught_up_scale_answer_is_held() -> None:
    async def scenario() -> None:
        index = make_index(Clock())
        resolver = Resolver(index, grace_ms=5000)
        index.apply(ROUTE, DEPLOY, scale_fact("alice", "10", 5))
        index.apply(ROUTE, DEPLOY, count_update("bob", 4, uid="d2"))
        found = await asyncio.wait_for(resolver.resolve(scaled("20", "10", 5)), 1.0)
        assert (found.tier, found.author) == (Tier.SCALE, "alice"), "a live range answers at once"
        caught_content = caught("20", "10", 4, uid="d2")._replace(content_key=content_key(b"4"))
        found = await asyncio.wait_for(resolver.resolve(caught_content), 1.0)
        assert (found.tier, found.author) == (Tier.ADMISSION, "bob"), "a content answer is not held"

    asyncio.run(scenario())
