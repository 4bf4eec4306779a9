"""Facts cannot overrule each other, floods stay in their own stream, memory stays within the caps."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

from prometheus_client import REGISTRY

from pipeline.attribution import FactIndex, IndexLimits, Resolver, Tier
from pipeline.codec.fact_batch import FactRow
from pipeline.models import GroupResource
from tests.attribution.helpers import CM, DEPLOY, ROUTE, fact, make_index, query, removal


def conflicts_counted(route: str = ROUTE) -> float:
    return REGISTRY.get_sample_value("reverser_attribution_fact_conflicts_total", {"route": route}) or 0.0


def test_a_later_fact_of_another_user_for_the_same_version_is_a_conflict_not_a_winner() -> None:
    index = make_index()
    before = conflicts_counted()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="7")])
    index.apply(ROUTE, CM, [fact("mallory", "update", name="a", uid="u1", rv="7")])
    found = index.lookup(query(uid="u1", rv="7", name="a"))
    assert found.tier == Tier.CONFLICT
    assert (found.author, found.fact, found.resolved) == ("", None, False)
    assert [c.author for c in found.candidates] == ["alice", "mallory"]
    assert conflicts_counted() == before + 1
    # Order does not matter, and a third claimant changes nothing.
    index.apply(ROUTE, CM, [fact("mallory", "update", name="b", uid="u2", rv="8")])
    index.apply(ROUTE, CM, [fact("alice", "update", name="b", uid="u2", rv="8")])
    index.apply(ROUTE, CM, [fact("carol", "update", name="b", uid="u2", rv="8")])
    found = index.lookup(query(uid="u2", rv="8", name="b"))
    assert (found.tier, [c.author for c in found.candidates]) == (Tier.CONFLICT, ["mallory", "alice"])
    assert conflicts_counted() == before + 2


def test_the_same_user_twice_is_no_conflict() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="7")])
    index.apply(ROUTE, CM, [fact("alice", "patch", name="a", uid="u1", rv="7")])
    found = index.lookup(query(uid="u1", rv="7"))
    found_verb = found.fact is not None and found.fact.verb
    assert (found.tier, found.author, found_verb) == (Tier.EXACT, "alice", "patch")


def test_a_removal_in_conflict_names_no_one_unless_deletion_evidence_exists() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="7")])
    index.apply(ROUTE, CM, [fact("mallory", "update", name="a", uid="u1", rv="7")])
    # The latest write (mallory's) must not become the fallback of a removal at that version.
    assert index.lookup(removal(uid="u1", rv="7", name="a")).tier == Tier.CONFLICT
    index.apply(ROUTE, CM, [fact("bob", "delete", name="a", uid="u1", rv="9")])
    found = index.lookup(removal(uid="u1", rv="7", name="a"))
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "bob")


def test_a_second_users_delete_of_the_same_uid_is_a_conflict() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a", uid="u1", rv="9")])
    index.apply(ROUTE, CM, [fact("mallory", "delete", name="a", uid="u1", rv="10")])
    found = index.lookup(removal(uid="u1", rv="11", name="a"))
    assert (found.tier, [c.author for c in found.candidates]) == (Tier.CONFLICT, ["alice", "mallory"])


def test_a_conflict_ages_and_is_evicted_with_the_later_fact() -> None:
    index = make_index(max_facts_per_type=4, max_facts=100)
    index.apply(ROUTE, CM, [fact("alice", "update", uid="u1", rv="7")])
    index.apply(ROUTE, CM, [fact("mallory", "update", uid="u1", rv="7")])
    assert index.lookup(query(uid="u1", rv="7")).tier == Tier.CONFLICT
    for i in range(4):
        index.apply(ROUTE, CM, [fact("bob", "update", uid=f"x{i}", rv=f"{i}")])
    assert index.lookup(query(uid="u1", rv="7")).tier != Tier.CONFLICT
    assert index.scope_size(ROUTE, CM) <= 4


async def test_the_resolver_settles_on_a_conflict_at_once_and_names_no_one() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="7")])
    index.apply(ROUTE, CM, [fact("mallory", "update", name="a", uid="u1", rv="7")])
    found = await Resolver(index, grace_ms=600_000).resolve(query(uid="u1", rv="7", name="a"))
    assert (found.tier, found.resolved) == (Tier.CONFLICT, False)
    assert index.waiter_count() == 0


def test_a_flood_on_another_route_does_not_evict_this_routes_facts() -> None:
    index = make_index(max_facts_per_type=40, max_facts=40)
    for i in range(10):
        index.apply("prod", CM, [fact("alice", "update", name=f"a{i}")])
    for t in range(10):
        gr = GroupResource("evil.example", f"flood{t}s")
        for i in range(40):
            index.apply("attacker", gr, [fact("mallory", "update", name=f"f{t}-{i}")])
    assert index.scope_size("prod", CM) == 10
    for i in range(10):
        assert index.lookup(query(name=f"a{i}", route="prod")).author == "alice"
    assert len(index) == 40


def test_a_flooded_stream_evicts_its_own_facts_before_anyone_elses() -> None:
    index = make_index(max_facts_per_type=100, max_facts=30)
    for i in range(10):
        index.apply(ROUTE, CM, [fact("alice", "update", name=f"a{i}")])
        index.apply(ROUTE, DEPLOY, [fact("bob", "update", name=f"d{i}")])
    flood = GroupResource("", "secrets")
    for i in range(1000):
        index.apply(ROUTE, flood, [fact("mallory", "update", name=f"s{i}")])
    assert (index.scope_size(ROUTE, CM), index.scope_size(ROUTE, DEPLOY)) == (10, 10)
    assert index.scope_size(ROUTE, flood) == 10
    assert index.lookup(query(name="a0")).author == "alice"


# -- memory ----------------------------------------------------------------------------------------
TYPES = [f"kind{i}s" for i in range(4)]
PER_TYPE = 2048
TOTAL = 4 * PER_TYPE


def writes(count: int, seed: int) -> Iterator[tuple[str, list[FactRow]]]:
    """`count` uid+RV writes (2 entries each), spread over the types, made one at a time."""
    for i in range(count):
        n = seed * 10_000_000 + i
        row: FactRow = (
            f"user{i % 50}",
            "",
            "",
            "update",
            f"audit-{n:012d}",
            f"ns-{i % 20}",
            f"name-{n:012d}",
            f"uid-{n:024d}",
            f"{n}",
            0,
            None,
            None,
        )
        yield TYPES[i % len(TYPES)], [row]


def retained_bytes(facts: int, seed: int) -> tuple[FactIndex, int]:
    """The index after filing `facts` writes one record at a time, and the bytes it holds."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        index = FactIndex(IndexLimits(max_facts_per_type=PER_TYPE, max_facts=TOTAL))
        for gr_key, rows in writes(facts, seed):
            index.apply_records(ROUTE, gr_key, rows, None)
        gc.collect()
        return index, tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()


def test_replaying_four_times_the_caps_holds_memory_within_a_constant_of_the_caps() -> None:
    at_caps, at_caps_bytes = retained_bytes(TOTAL // 2, seed=1)
    assert len(at_caps) == TOTAL
    assert at_caps.evictions == {"per_type": 0, "total": 0}
    replayed, replayed_bytes = retained_bytes(4 * TOTAL // 2, seed=2)
    assert len(replayed) == TOTAL
    assert replayed.evictions["per_type"] == 3 * TOTAL
    # Evicted facts are released as they go: no multiple of the caps, whatever the window.
    assert replayed_bytes <= 1.1 * at_caps_bytes + 64 * 1024, (replayed_bytes, at_caps_bytes)
    for gr_key in TYPES:
        gr = GroupResource("", gr_key)
        assert replayed.order_length(ROUTE, gr) == PER_TYPE // 2, "the order holds only live filings"


def test_a_rewrite_storm_keeps_the_order_within_the_live_filings() -> None:
    index = make_index()
    for i in range(4000):
        index.apply(ROUTE, CM, [fact("alice", "update", name=f"n{i % 3}")])
        index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="1")])
    assert len(index) == 5
    assert index.order_length(ROUTE, CM) <= 4 + 64 + 1
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.EXACT


async def test_a_conflict_reaches_the_commit_as_the_unresolved_author() -> None:
    """The router stores a conflict as UNRESOLVED (tier `conflict`); the commit renders it as unknown."""
    from pipeline.codec.stream_id import StreamId
    from pipeline.codec.watch_event import LiveEvent, StreamHead, WatchRecord
    from pipeline.commit.identity import UNRESOLVED, Identity, author_identity
    from pipeline.router.lookup import IndexLookup

    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="7")])
    index.apply(ROUTE, CM, [fact("mallory", "update", name="a", uid="u1", rv="7")])
    body = LiveEvent(
        type="MODIFIED",
        deleting=False,
        uid="u1",
        resource_version="7",
        namespace="ns-1",
        name="a",
        labels={},
        object_json=b"{}",
    )
    head = StreamHead(ROUTE, StreamId("t", "c", CM.group, "v1", CM.resource, "ns-1"))
    watch = WatchRecord(0, 0, head, 0, body)
    author = await IndexLookup(None, Resolver(index, grace_ms=0)).author_for(watch)  # type: ignore[arg-type]
    assert (author.outcome, author.username, author.tier) == ("UNRESOLVED", "", "conflict")
    committer = Identity("Reverser", "reverser@example.com")
    identity = author_identity(author.outcome, author.username, author.display_name, author.email, committer)
    assert identity == UNRESOLVED
