"""Index edge cases mutation testing found unguarded: limits' fallbacks, eviction after a sweep,
the total cap keeping a partly evicted scope, waiter keys of rv-only and delete facts, identities.
"""

from __future__ import annotations

import itertools
import logging

import pytest

from pipeline.attribution import FactIndex, IndexLimits, Tier
from pipeline.attribution.model import StoredFact
from pipeline.codec.fact_batch import AuthorFact
from pipeline.config import AttributionSettings
from pipeline.content.scale import scale_key
from pipeline.models import GroupResource
from tests.attribution.helpers import CM, DEPLOY, ROUTE, T0, Clock, fact, make_index, query, removal

SECRETS = GroupResource("", "secrets")


DEFAULTS = (600_000, 4096, 65536, 30_000)


def limits(ttl_s: float, per_type: int, total: int, window_s: float) -> dict[str, float]:
    return {
        "ttl_s": ttl_s, "max_facts_per_type": per_type, "max_facts": total, "collection_window_s": window_s
    }  # fmt: skip


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, DEFAULTS),
        (limits(0, 0, 0, 0), DEFAULTS),
        (limits(-1, -1, -1, -1), DEFAULTS),
        (limits(2.5, 1, 1, 0.25), (2500, 1, 1, 250)),
        (limits(0.001, 7, 9, 45), (1, 7, 9, 45_000)),
    ],
)
def test_limits_take_positive_values_and_fall_back_otherwise(
    given: dict[str, float], expected: tuple[int, int, int, int]
) -> None:
    got = IndexLimits(**given)  # type: ignore[arg-type]
    assert (got.ttl_ms, got.max_facts_per_type, got.max_facts, got.collection_window_ms) == expected


def test_eviction_after_a_sweep_skips_the_expired_collection() -> None:
    """A swept deletecollection stays dead: later evictions pop the right collection and filing works."""
    clock = Clock()
    index = make_index(clock, ttl_s=10, max_facts_per_type=3)
    index.apply(ROUTE, CM, [fact("old", "deletecollection", uids=["u0"])], clock.ms)
    clock.now += 6
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], clock.ms)
    clock.now += 6
    assert index.sweep() == 1, "only the collection has expired"
    assert index.scope_size(ROUTE, CM) == 2
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u2"])], clock.ms)
    # over the per-type cap: the oldest live entries go, never the new collection
    index.apply(ROUTE, CM, [fact("bob", "create", name="b", uid="u3", rv="1")], clock.ms)
    assert index.scope_size(ROUTE, CM) == 3
    found = index.lookup(removal(uid="u2", rv="9", name="c"))
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_BODY_UID, "admin")
    assert index.lookup(query(uid="u3", rv="1")).author == "bob"
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT


def test_total_cap_keeps_a_scope_that_still_holds_a_live_entry() -> None:
    index = make_index(max_facts=3)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, SECRETS, [fact("bob", "update", name="s1")])
    index.apply(ROUTE, SECRETS, [fact("carol", "update", name="s2")])
    assert len(index) == 3
    assert index.evictions["total"] == 1
    assert index.scope_size(ROUTE, SECRETS) == 1
    found = index.lookup(query(name="s2", gr=SECRETS))
    assert (found.tier, found.author) == (Tier.NAME, "carol")
    assert index.lookup(query(name="s1", gr=SECRETS)).tier == Tier.ABSENT
    assert index.lookup(query(uid="u1", rv="1")).author == "alice"
    # filing a third type takes from the largest scope, which keeps what it still holds
    index.apply(ROUTE, DEPLOY, [fact("dave", "update", name="d1")])
    assert index.evictions["total"] == 2
    assert index.scope_size(ROUTE, CM) == 1
    assert index.scope_count() == 3
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT, "the exact entry went first"
    assert index.lookup(removal(uid="u1", rv="2")).tier == Tier.ABSENT, "its latest entry is a write"


def test_an_rv_only_fact_wakes_a_waiter_on_that_resource_version() -> None:
    index = make_index()
    waiter = index.register(query(uid="u1", rv="5", name="a"))
    other = index.register(query(uid="u2", rv="6", name="b"))
    index.apply(ROUTE, CM, [fact("alice", "update", rv="5")])
    assert waiter.event.is_set()
    assert not other.event.is_set()
    assert index.lookup(query(uid="u1", rv="5", name="a")).tier == Tier.RESOURCE_VERSION
    index.unregister(waiter)
    index.unregister(other)
    assert index.waiter_count() == 0


def test_a_delete_fact_of_another_rv_wakes_a_removal_waiter() -> None:
    index = make_index()
    waiter = index.register(removal(uid="u1", rv="8", name="a"))
    index.apply(ROUTE, CM, [fact("bob", "delete", name="a", uid="u1", rv="7")])
    assert waiter.event.is_set()
    found = index.lookup(removal(uid="u1", rv="8", name="a"))
    assert found.author == "bob"
    index.unregister(waiter)
    assert index.waiter_count() == 0


def test_a_name_fact_wakes_only_waiters_on_that_name() -> None:
    index = make_index()
    waiter = index.register(query(uid="u1", rv="5", name="a"))
    index.apply(ROUTE, CM, [fact("alice", "update", name="b")])
    assert not waiter.event.is_set()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a")])
    assert waiter.event.is_set()
    index.unregister(waiter)


def identity_fact(display: str, email: str, rv: str) -> AuthorFact:
    return AuthorFact(
        author="alice", display_name=display, email=email, verb="update", namespace="ns-1",
        name="a", uid="u1", resource_version=rv,
    )  # fmt: skip


def test_a_changed_display_name_or_email_is_seen() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [identity_fact("", "", "1")])
    index.apply(ROUTE, CM, [identity_fact("Alice A", "a@example.com", "2")])
    index.apply(ROUTE, CM, [identity_fact("Alice B", "a@example.com", "3")])
    index.apply(ROUTE, CM, [identity_fact("Alice B", "b@example.com", "4")])
    index.apply(ROUTE, CM, [identity_fact("", "", "5")])
    seen = []
    for rv in "12345":
        found = index.lookup(query(uid="u1", rv=rv))
        assert found.tier == Tier.EXACT
        assert found.fact is not None
        assert isinstance(found.fact, StoredFact)
        seen.append((found.fact.identity.display_name, found.fact.identity.email))
    assert seen == [
        ("", ""),
        ("Alice A", "a@example.com"),
        ("Alice B", "a@example.com"),
        ("Alice B", "b@example.com"),
        ("", ""),
    ]


def test_stale_references_reach_the_documented_bound_and_no_further() -> None:
    """Compaction runs once stale references exceed a quarter of the live ones plus 64, not before.

    One live filing rewritten over and over: the order may hold 64 stale references (so a rewrite
    storm does not compact on every write), never 65.
    """
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1")])
    lengths = []
    for _ in range(200):
        index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1")])
        lengths.append(index.order_length(ROUTE, CM))
    assert len(index) == 1
    assert max(lengths) == 1 + 64
    assert lengths[:64] == list(range(2, 66)), "no compaction below the bound"
    assert lengths[64] == 1, "compacted as soon as the bound was passed"


def test_eviction_through_stale_references_forgets_them() -> None:
    """Stale references popped by eviction no longer count: the next storm gets the full slack."""
    index = make_index(max_facts_per_type=2)
    for _ in range(11):
        index.apply(ROUTE, CM, [fact("alice", "update", name="a")])
    index.apply(ROUTE, CM, [fact("bob", "update", name="b")])
    index.apply(ROUTE, CM, [fact("carol", "update", name="c")])  # evicts through a's stale references
    assert index.order_length(ROUTE, CM) == 2
    assert index.lookup(query(name="a")).tier == Tier.ABSENT
    lengths = []
    for _ in range(100):
        index.apply(ROUTE, CM, [fact("carol", "update", name="c")])
        lengths.append(index.order_length(ROUTE, CM))
    assert max(lengths) == 2 + 64


def test_a_conflict_outliving_its_facts_other_slots_is_still_evicted_in_turn() -> None:
    """A fact held only by a conflict claim stays in the eviction order, through compaction too."""
    index = make_index(max_facts_per_type=3)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("bob", "update", name="a", uid="u1", rv="1")])  # conflicting claim
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.CONFLICT
    index.apply(ROUTE, CM, [fact("carol", "update", name="a", uid="u1", rv="2")])  # bob's is no longer latest
    index.sweep()
    for i in range(6):
        index.apply(ROUTE, CM, [fact("dave", "update", name=f"n{i}")])
    assert index.scope_size(ROUTE, CM) == 3
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT, "the conflict was evicted with its fact"
    assert [index.lookup(query(name=f"n{i}")).tier for i in range(6)] == [Tier.ABSENT] * 3 + [Tier.NAME] * 3


def test_from_settings_takes_every_limit() -> None:
    settings = AttributionSettings(ttl_s=5, max_facts_per_type=7, max_facts=9, collection_window_s=2)
    limits = FactIndex.from_settings(settings).limits
    assert (limits.ttl_ms, limits.max_facts_per_type, limits.max_facts, limits.collection_window_ms) == (
        5000,
        7,
        9,
        2000,
    )


def test_an_append_time_of_zero_means_now() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], 0)
    clock.now += 10
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.EXACT


def test_a_collection_exactly_at_the_ttl_survives_the_sweep() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10)
    index.apply(ROUTE, CM, [fact("older", "deletecollection", uids=["u0"])], clock.ms)
    clock.now += 1
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u1"])], clock.ms)
    clock.now += 10
    assert index.sweep() == 1, "only the older collection is past the TTL"
    assert index.lookup(removal(uid="u1", rv="2")).tier == Tier.DELETECOLLECTION_BODY_UID
    clock.now += 0.001
    assert index.sweep() == 1
    assert index.scope_count() == 0


def test_an_expired_conflict_is_swept() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], clock.ms)
    index.apply(ROUTE, CM, [fact("bob", "update", name="a", uid="u1", rv="1")], clock.ms)
    assert len(index) == 3, "exact, latest and the conflict"
    clock.now += 11
    assert index.sweep() == 3
    assert (len(index), index.scope_count()) == (0, 0)


def test_stage_time_is_kept_in_ms_and_advances_the_watermark() -> None:
    index = make_index()
    stage_us = int(T0 * 1_000_000) - 5_123_456
    waiter = index.register(query(uid="u9", rv="9", name="z")._replace(event_ms=stage_us // 1000))
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1", stage_us=stage_us)])
    assert index.lookup(query(uid="u1", rv="1")).event_ms == stage_us // 1000
    assert index.watermark(ROUTE) == stage_us // 1000
    assert waiter.event.is_set(), "audit time reaching the event wakes its waiter"
    index.unregister(waiter)


def test_same_author_rewrites_of_alternating_versions_stay_within_the_bound() -> None:
    """Each rewrite drops the exact entry of two filings ago: those references count as stale."""
    index = make_index()
    lengths = []
    for i in range(200):
        index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv=str(i % 2))])
        lengths.append(index.order_length(ROUTE, CM))
    assert len(index) == 3
    assert max(lengths) <= 2 + 64 + 1


def test_a_conflict_is_counted_and_logged_with_both_claimants(caplog: pytest.LogCaptureFixture) -> None:
    from prometheus_client import REGISTRY

    def conflicts() -> float:
        found = REGISTRY.get_sample_value("reverser_attribution_fact_conflicts_total", {"route": ROUTE})
        return found or 0.0

    before = conflicts()
    index = make_index()
    caplog.set_level(logging.INFO, logger="pipeline.attribution.index")
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("bob", "update", name="a", uid="u1", rv="1")])
    assert conflicts() == before + 1
    assert index.conflicts == 1
    (message,) = [r.getMessage() for r in caplog.records if "conflicting facts" in r.getMessage()]
    assert (
        "conflicting facts for uid/resourceVersion u1/1: 'alice' (audit audit-alice-create) and 'bob' "
        "(audit audit-bob-update)" in message
    )


def test_an_invalid_selector_is_logged_and_never_matches(caplog: pytest.LogCaptureFixture) -> None:
    index = make_index()
    caplog.set_level(logging.INFO, logger="pipeline.attribution.index")
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", selector="app in (")])
    assert any("invalid label selector 'app in ('" in r.getMessage() for r in caplog.records)
    assert index.lookup(removal(uid="u1", rv="2", name="a", labels={"app": "web"})).tier == Tier.ABSENT


def test_a_deletecollection_wakes_removal_waiters_in_its_namespace_only() -> None:
    index = make_index()
    here = index.register(removal(uid="u1", rv="2", name="a"))
    elsewhere = index.register(removal(uid="u2", rv="2", name="b", ns="ns-2"))
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", selector="app=web")])
    assert here.event.is_set()
    assert not elsewhere.event.is_set()
    index.unregister(here)
    index.unregister(elsewhere)


def test_a_deletion_conflict_lives_as_long_as_its_later_claim() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10)
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a", uid="u1", rv="1")], clock.ms)
    clock.now += 5
    index.apply(ROUTE, CM, [fact("bob", "delete", name="a", uid="u1", rv="2")], clock.ms)
    clock.now += 10
    assert index.lookup(removal(uid="u1", rv="3")).tier == Tier.CONFLICT, (
        "the later claim is exactly at the TTL"
    )
    clock.now += 0.001
    found = index.lookup(removal(uid="u1", rv="3"))
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "alice"), "sticky removals outlive the conflict"


def test_a_write_conflict_lives_as_long_as_its_later_claim() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], clock.ms)
    clock.now += 8
    index.apply(ROUTE, CM, [fact("bob", "update", name="a", uid="u1", rv="1")], clock.ms)
    clock.now += 4  # alice's claim is past the TTL, bob's is not
    found = index.lookup(query(uid="u1", rv="1", name="a"))
    assert found.tier == Tier.CONFLICT
    assert [c.author for c in found.candidates] == ["alice", "bob"]
    clock.now += 7  # both claims past the TTL
    assert index.lookup(query(uid="u1", rv="1", name="a")).tier == Tier.ABSENT


def test_removal_evidence_exactly_at_the_ttl_still_counts() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10, collection_window_s=30)
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a")], clock.ms)
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", ns="ns-2")], clock.ms)
    clock.now += 10
    assert index.lookup(removal(uid="u1", rv="2", name="a")).tier == Tier.NAME
    assert index.lookup(removal(uid="u5", rv="2", name="e", ns="ns-2")).tier == Tier.DELETECOLLECTION_SCOPE
    clock.now += 0.001
    assert index.lookup(removal(uid="u1", rv="2", name="a")).tier == Tier.ABSENT
    assert index.lookup(removal(uid="u5", rv="2", name="e", ns="ns-2")).tier == Tier.ABSENT


def deletion_claimed_twice_then_deleted_again(clock: Clock) -> FactIndex:
    """carol and alice both delete u1 (a conflict), alice deletes it once more at resourceVersion 1.

    The third delete cannot refresh the delete slot (it is in conflict), so it lands only in the
    exact and latest slots. With a per-type cap of 4, filing names evicts carol's filing (the
    delete slot) first, then alice's first one (the conflict): what is left is her delete in latest.
    """
    index = make_index(clock, max_facts_per_type=4)
    index.apply(ROUTE, CM, [fact("carol", "delete", name="a", uid="u1")], clock.ms)
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a", uid="u1")], clock.ms)
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a", uid="u1", rv="1")], clock.ms)
    return index


def test_a_deletion_conflict_whose_delete_slot_was_evicted_is_still_a_deletion_candidate() -> None:
    clock = Clock()
    index = deletion_claimed_twice_then_deleted_again(clock)
    index.apply(ROUTE, CM, [fact("dave", "update", name="n0")], clock.ms)  # evicts carol's filing
    assert index.lookup(removal(uid="u1", rv="2", name="a")).tier == Tier.CONFLICT
    assert index.deletion_candidates(ROUTE, CM, "ns-1") == [("u1", "ns-1", "a")]
    assert index.deletion_candidates(ROUTE, CM, "elsewhere") == []


def test_a_removal_takes_a_delete_in_latest_until_its_ttl_once_the_conflict_is_evicted() -> None:
    """docs/attribution.md `latest`: a delete there answers a removal; dead once older than the TTL."""
    clock = Clock()
    index = deletion_claimed_twice_then_deleted_again(clock)
    filed_s = clock.now
    for i in range(2):  # evicts carol's filing, then the conflict with alice's first delete
        index.apply(ROUTE, CM, [fact("dave", "update", name=f"n{i}")], clock.ms)
    assert [index.lookup(query(name=f"n{i}")).tier for i in range(2)] == [Tier.NAME, Tier.NAME]
    found = index.lookup(removal(uid="u1", rv="2", name="a"))
    assert (found.tier, found.author) == (Tier.LATEST, "alice")
    clock.now = filed_s + 600  # exactly the default TTL old: still live
    assert index.lookup(removal(uid="u1", rv="2", name="a")).tier == Tier.LATEST
    clock.now = filed_s + 600.002
    assert index.lookup(removal(uid="u1", rv="2", name="a")).tier == Tier.ABSENT


def test_a_conflict_is_live_until_exactly_the_ttl() -> None:
    clock = Clock()
    index = make_index(clock)
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="1")], clock.ms)
    index.apply(ROUTE, CM, [fact("bob", "patch", name="a", uid="u1", rv="1")], clock.ms)
    filed_s = clock.now
    clock.now = filed_s + 600
    assert index.lookup(query(uid="u1", rv="1", name="a")).tier == Tier.CONFLICT
    assert index.lookup(removal(uid="u1", rv="1", name="a")).tier == Tier.CONFLICT
    clock.now = filed_s + 600.002
    assert index.lookup(query(uid="u1", rv="1", name="a")).tier == Tier.ABSENT


def test_a_filing_whose_conflict_the_budget_did_not_reach_goes_back_to_the_front() -> None:
    """Per-type eviction is oldest filing first; a filing evicted only in part is resumed next time."""
    index = make_index(max_facts_per_type=3)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])  # exact, latest
    index.apply(ROUTE, CM, [fact("bob", "update", name="a", uid="u1", rv="1")])  # latest, conflict
    index.apply(ROUTE, CM, [fact("dave", "update", name="n0")])  # evicts alice's exact slot
    index.apply(ROUTE, CM, [fact("dave", "update", name="n1")])  # bob's latest; his conflict waits
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.CONFLICT
    index.apply(ROUTE, CM, [fact("dave", "update", name="n2")])  # bob's conflict, before n0
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT
    assert [index.lookup(query(name=f"n{i}")).tier for i in range(3)] == [Tier.NAME] * 3
    assert index.scope_size(ROUTE, CM) == 3


def test_a_live_collection_keeps_its_place_in_the_eviction_order_through_compaction() -> None:
    index = make_index(max_facts_per_type=3)
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u9"])])  # the oldest filing
    for _ in range(200):  # a rewrite storm: stale references pile up and the order is compacted
        index.apply(ROUTE, CM, [fact("carol", "update", name="c")])
    assert index.order_length(ROUTE, CM) < 200, "the storm compacted the order"
    assert index.lookup(removal(uid="u9")).tier == Tier.DELETECOLLECTION_BODY_UID
    index.apply(ROUTE, CM, [fact("dave", "update", name="n0"), fact("dave", "update", name="n1")])
    assert index.lookup(removal(uid="u9")).tier == Tier.ABSENT, "the oldest filing goes first"
    assert [index.lookup(query(name=n)).tier for n in ("c", "n0", "n1")] == [Tier.NAME] * 3


def test_over_the_total_cap_the_route_holding_the_most_entries_gives_one_up_not_the_filing_one() -> None:
    """docs/attribution.md: the total cap evicts from the route holding the most entries."""
    index = make_index(max_facts_per_type=50, max_facts=6)
    for i in range(5):
        index.apply("busy", CM, [fact("bot", "update", name=f"b{i}")])
    index.apply("quiet", CM, [fact("alice", "update", name="q0")])
    index.apply("quiet", CM, [fact("alice", "update", name="q1")])  # 7 entries: one must go
    assert index.scope_size("busy", CM) == 4
    assert index.lookup(query(route="busy", name="b0")).tier == Tier.ABSENT, "busy's oldest goes"
    assert [index.lookup(query(route="quiet", name=n)).tier for n in ("q0", "q1")] == [Tier.NAME] * 2


def test_a_live_rv_only_filing_keeps_its_place_in_the_eviction_order_through_compaction() -> None:
    index = make_index(max_facts_per_type=3)
    index.apply(ROUTE, CM, [fact("alice", "update", rv="5")])  # the oldest filing, keyed by RV only
    for _ in range(200):
        index.apply(ROUTE, CM, [fact("carol", "update", name="c")])
    assert index.lookup(query(rv="5")).tier == Tier.RESOURCE_VERSION
    index.apply(ROUTE, CM, [fact("dave", "update", name="n0"), fact("dave", "update", name="n1")])
    assert index.lookup(query(rv="5")).tier == Tier.ABSENT, "the oldest filing goes first"
    assert [index.lookup(query(name=n)).tier for n in ("c", "n0", "n1")] == [Tier.NAME] * 3


def test_an_exact_fact_wakes_the_write_waiter_on_that_uid_and_version_only() -> None:
    index = make_index()
    waiter = index.register(query(uid="u1", rv="5", name="a"))
    older = index.register(query(uid="u1", rv="4", name="a"))
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="5")])
    assert waiter.event.is_set()
    assert not older.event.is_set(), "a write waiter does not wait on the uid's latest fact"
    index.unregister(waiter)
    index.unregister(older)
    assert index.waiter_count() == 0


def test_a_waiter_without_an_event_time_is_not_woken_by_the_watermark() -> None:
    """Only a query that knows when its event happened waits for audit time to reach it."""
    index = make_index()
    untimed = index.register(query(uid="u9", rv="9", name="z"))
    stage_us = int(T0 * 1_000_000) - 1_000_000
    timed = index.register(query(uid="u9", rv="9", name="z")._replace(event_ms=stage_us // 1000))
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1", stage_us=stage_us)])
    assert index.watermark(ROUTE) == stage_us // 1000
    assert timed.event.is_set()
    assert not untimed.event.is_set()
    index.unregister(timed)
    index.unregister(untimed)


def test_a_scope_the_total_cap_empties_is_dropped() -> None:
    """A tie for the largest scope goes to the one being filed; emptied, it leaves the index."""
    index = make_index(max_facts=1)
    index.apply(ROUTE, CM, [fact("alice", "update", name="a")])
    index.apply(ROUTE, SECRETS, [fact("bob", "update", name="s1")])
    assert index.evictions["total"] == 1
    assert (len(index), index.scope_count()) == (1, 1)
    assert index.scope_size(ROUTE, SECRETS) == 0
    assert index.lookup(query(name="a")).author == "alice"
    index.apply(ROUTE, DEPLOY, [fact("carol", "update", name="d1")])
    assert (len(index), index.scope_count()) == (1, 1)
    assert index.lookup(query(name="a")).author == "alice"


def test_compaction_is_amortized_over_the_stale_references_it_drops() -> None:
    """After compacting, stale references may pile up to the bound again before the next one:
    compacting on every rewrite would cost a pass over the order per fact."""
    index = make_index()
    lengths = []
    for i in range(300):
        index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv=str(i % 2))])
        lengths.append(index.order_length(ROUTE, CM))
    compactions = sum(1 for before, after in itertools.pairwise(lengths) if after < before)
    assert 2 <= compactions <= 300 // 64
    assert max(lengths[150:]) > 60, "references pile up again after a compaction"


def test_a_batch_keeps_filing_after_the_total_cap_drops_its_scope() -> None:
    """The rest of a batch goes into a live scope, never into the one the cap just dropped
    (whose entries nothing could find, while the cap took live entries elsewhere)."""
    index = make_index(max_facts=1)
    index.apply(ROUTE, CM, [fact("alice", "update", name="a")])
    index.apply(ROUTE, SECRETS, [fact("bob", "update", name="s1"), fact("bob", "update", name="s2")])
    assert index.evictions["total"] == 2
    assert (len(index), index.scope_count()) == (1, 1)
    assert index.lookup(query(name="a")).author == "alice"


def test_a_tie_between_routes_at_the_total_cap_goes_to_the_route_being_filed() -> None:
    index = make_index(max_facts=3)
    index.apply("first", CM, [fact("alice", "update", name="a1"), fact("alice", "update", name="a2")])
    index.apply("second", CM, [fact("bob", "update", name="b1")])
    index.apply("second", CM, [fact("bob", "update", name="b2")])
    assert index.evictions["total"] == 1
    assert [index.lookup(query(route="first", name=n)).author for n in ("a1", "a2")] == ["alice", "alice"]
    assert index.lookup(query(route="second", name="b1")).tier == Tier.ABSENT
    assert index.lookup(query(route="second", name="b2")).author == "bob"


def test_the_limits_defaults_are_the_attribution_sections() -> None:
    """One owner: the index falls back to what `attribution` documents, not a copy of it."""
    section = AttributionSettings()
    got = IndexLimits()
    assert (got.ttl_ms, got.max_facts_per_type, got.max_facts, got.collection_window_ms) == (
        int(section.ttl_s * 1000),
        section.max_facts_per_type,
        section.max_facts,
        int(section.collection_window_s * 1000),
    )
    configured = AttributionSettings(ttl_s=5, max_facts_per_type=3, max_facts=8, collection_window_s=2)
    from_section = IndexLimits.from_settings(configured)
    assert (
        from_section.ttl_ms,
        from_section.max_facts_per_type,
        from_section.max_facts,
        from_section.collection_window_ms,
    ) == (5_000, 3, 8, 2_000)


def test_a_content_key_two_users_claimed_is_a_conflict_while_other_slots_are_claimed_too() -> None:
    index = make_index()
    # another object's slot is already claimed, so the scope holds conflicts
    index.apply(ROUTE, CM, [fact("alice", "update", name="x", uid="u9", rv="5")])
    index.apply(ROUTE, CM, [fact("bob", "update", name="x", uid="u9", rv="5")])
    key = "content:" + "ab" * 32
    index.apply(ROUTE, CM, [fact("alice", "update", name="web", uid="u1", rv=key)])
    index.apply(ROUTE, CM, [fact("carol", "update", name="web", uid="u1", rv=key)])
    found = index.lookup(query(uid="u1", rv="12", name="web")._replace(content_key=key))
    assert found.tier == Tier.CONFLICT
    assert {c.identity.author for c in found.candidates} == {"alice", "carol"}


def test_deletion_candidates_leave_out_collections_expired_or_of_another_namespace() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, CM, [fact("bob", "deletecollection", ns="team-a", uids=["u-old"])])
    clock.now += 61
    index.apply(ROUTE, CM, [fact("bob", "deletecollection", ns="team-a", uids=["u-new"])])
    index.apply(ROUTE, CM, [fact("bob", "deletecollection", ns="team-b", uids=["u-b"])])
    assert index.deletion_candidates(ROUTE, CM, "team-a") == [("u-new", "team-a", "")]
    assert sorted(index.deletion_candidates(ROUTE, CM, "")) == [
        ("u-b", "team-b", ""),
        ("u-new", "team-a", ""),
    ]


def test_name_only_facts_are_still_evicted_oldest_first_after_a_compaction() -> None:
    """A rewrite storm of one name compacts the order; the names it did not rewrite must still be
    on it, so the per-type cap evicts the oldest of them and keeps the newest."""
    index = make_index(max_facts_per_type=4)
    for name in ("n1", "n2", "n3", "n4"):
        index.apply(ROUTE, CM, [fact("alice", "update", name=name)])
    for _ in range(200):  # every rewrite leaves a stale reference behind: compactions
        index.apply(ROUTE, CM, [fact("bob", "update", name="n4")])
    index.apply(ROUTE, CM, [fact("carol", "update", name="n5")])
    assert index.lookup(query(name="n5")).author == "carol"
    assert index.lookup(query(name="n1")).tier == Tier.ABSENT, "the oldest name was evicted"
    assert index.lookup(query(name="n2")).author == "alice"


def test_a_later_scale_counts_while_its_claim_outlives_its_first_fact() -> None:
    """The first claimant's exact slot ages out before the claim, which lives as long as the later
    fact: a gap's later scale of another count still refuses the earlier scale until then."""
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, DEPLOY, [fact("bob", "update", name="web", uid="d1", rv=scale_key("12", 3))])
    clock.now += 40
    index.apply(ROUTE, DEPLOY, [fact("carol", "update", name="web", uid="d1", rv=scale_key("12", 3))])
    clock.now += 1
    index.apply(ROUTE, DEPLOY, [fact("alice", "update", name="web", uid="d1", rv=scale_key("10", 5))])
    caught = query(uid="d1", rv="20", name="web", gr=DEPLOY)._replace(
        previous_rv="10", replicas=5, caught_up=True
    )
    clock.now = T0 + 100  # bob's slot is gone; the claim's later fact is exactly at its TTL
    assert index.lookup(caught).tier == Tier.ABSENT
    clock.now += 0.001
    assert index.lookup(caught).author == "alice", "the claim aged out too"
