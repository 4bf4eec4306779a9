"""Deletion evidence of a whole scope, for objects a snapshot shows only as absences."""

from __future__ import annotations

import asyncio

from pipeline.attribution import Resolver, Tier
from tests.attribution.helpers import CM, ROUTE, Clock, fact, make_index
from tests.support.wait import wait_for

GUARD_S = 10.0


def test_candidates_are_every_object_with_deletion_evidence_in_the_namespace() -> None:
    index = make_index()
    index.apply(
        ROUTE,
        CM,
        [
            fact("alice", "update", ns="shop", name="w", uid="u-w", rv="1"),  # a write: no evidence
            fact("bob", "delete", ns="shop", name="a", uid="u-a", rv="2"),
            fact("bob", "delete", ns="other", name="x", uid="u-x", rv="3"),
            fact("carol", "deletecollection", ns="shop", uids=["u-b", "u-a"]),
            fact("dave", "delete", ns="shop", name="n"),  # name-keyed (Status-answered)
            fact("dave", "update", ns="shop", name="m"),  # name-keyed write: no evidence
        ],
    )
    assert sorted(index.deletion_candidates(ROUTE, CM, "shop")) == [
        ("", "shop", "n"),
        ("u-a", "shop", "a"),
        ("u-b", "shop", ""),
    ]
    assert ("u-x", "other", "x") in index.deletion_candidates(ROUTE, CM, "")
    assert index.deletion_candidates("elsewhere", CM, "shop") == []


async def test_deletions_resolve_each_candidate_like_its_deleted_event() -> None:
    index = make_index()
    index.apply(
        ROUTE,
        CM,
        [
            fact("bob", "delete", ns="shop", name="a", uid="u-a", rv="2"),
            fact("mallory", "delete", ns="shop", name="a", uid="u-a", rv="2"),  # a second claim
            fact("carol", "deletecollection", ns="shop", uids=["u-b"]),
            fact("dave", "delete", ns="shop", name="n"),
            fact("erin", "delete", ns="shop", name="c", uid="u-c", rv="4"),
        ],
    )
    found = await Resolver(index, grace_ms=0).deletions(ROUTE, CM, "shop", 0)
    answers = {(uid, name): (a.tier, a.author) for uid, _ns, name, a in found}
    assert answers == {
        ("u-a", "a"): (Tier.CONFLICT, ""),
        ("u-b", ""): (Tier.DELETECOLLECTION_BODY_UID, "carol"),
        ("", "n"): (Tier.NAME, "dave"),
        ("u-c", "c"): (Tier.DELETE_STICKY, "erin"),
    }


async def test_deletions_wait_until_audit_time_reaches_the_snapshot() -> None:
    """A delete made just before the snapshot ended whose audit batch is late is still found."""
    clock = Clock()
    index = make_index(clock)
    event_ms = clock.ms
    index.apply(
        ROUTE,
        CM,
        [fact("old", "update", ns="shop", name="z", uid="u-z", rv="1", stage_us=(event_ms - 10_000) * 1000)],
        clock.ms,
    )
    resolver = Resolver(index, grace_ms=0, max_wait_ms=600_000)
    task = asyncio.create_task(resolver.deletions(ROUTE, CM, "shop", event_ms))
    await wait_for(lambda: index.waiter_count() > 0, what="the hold")
    assert not task.done(), "answered although audit time had not reached the snapshot"
    index.apply(
        ROUTE,
        CM,
        [fact("bob", "delete", ns="shop", name="a", uid="u-a", rv="2", stage_us=(event_ms + 5) * 1000)],
        clock.ms,
    )
    found = await asyncio.wait_for(task, GUARD_S)
    assert [(uid, a.author) for uid, _ns, _name, a in found] == [("u-a", "bob")]
    assert index.waiter_count() == 0
