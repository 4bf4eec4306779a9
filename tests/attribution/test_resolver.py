"""Waiting for facts: register-then-check, coalescing wakes, fallbacks, grace and cleanup."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import REGISTRY

from pipeline.attribution import Resolver, Tier, query_from_watch_object
from pipeline.models import GroupResource
from tests.attribution.helpers import CM, ROUTE, fact, make_index, query, removal

GUARD_S = 10.0  # only bounds a hung test; never a timing assertion


async def settle() -> None:
    """Let every ready task run until each one blocks again."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_waiter_is_woken_by_a_late_fact_and_leaves_the_registry_empty() -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=60_000)
    task = asyncio.create_task(resolver.resolve(query(uid="u1", rv="1", name="a")))
    await settle()
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
    await settle()
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
    await settle()
    assert not task.done(), "a removal that only found a write keeps waiting"
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u1"])])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_BODY_UID, "admin")


async def test_removal_holding_a_write_does_not_return_before_the_grace() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    task = asyncio.create_task(Resolver(index, grace_ms=600_000).resolve(removal(uid="u1", rv="2", name="a")))
    await settle()
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
    await settle()
    index.apply(ROUTE, CM, [fact("deleter", "delete", name="a", uid="u1", rv="2")])
    found = await asyncio.wait_for(task, GUARD_S)
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "deleter")


async def test_name_fact_wakes_an_earlier_waiter() -> None:
    index = make_index()
    resolver = Resolver(index, grace_ms=600_000)
    task = asyncio.create_task(resolver.resolve(removal(uid="u1", rv="2", name="fl-1")))
    await settle()
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
    await settle()
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


def test_negative_grace_is_rejected() -> None:
    with pytest.raises(ValueError, match="grace"):
        Resolver(make_index(), grace_ms=-1)


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
