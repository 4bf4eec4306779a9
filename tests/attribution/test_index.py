"""The join: tier order, TTL, caps, sweep and route isolation (ports of upstream's index tests)."""

from __future__ import annotations

from pipeline.attribution import Tier, actor_kind
from pipeline.attribution.index import NAME_STAMP_MARGIN_MS
from pipeline.codec.fact_batch import AuthorFact
from tests.attribution.helpers import CM, DEPLOY, ROUTE, Clock, fact, make_index, query, removal

LABELS = {"app": "web"}


def test_a_miss_is_absent_and_a_removal_never_gets_the_last_writer() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    assert index.lookup(query(uid="u1", rv="2", name="b")).tier == Tier.ABSENT
    assert index.lookup(removal(uid="u1", rv="2", name="b")).tier == Tier.ABSENT
    index.apply(ROUTE, CM, [fact("bob", "delete", name="a", uid="u1", rv="3")])
    found = index.lookup(removal(uid="u1", rv="2", name="b"))
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "bob")


def test_route_isolation_including_rv_only() -> None:
    index = make_index()
    index.apply("a", CM, [fact("alice", "create", name="x", uid="u1", rv="1")])
    index.apply("a", CM, [fact("rv-only", "update", rv="77")])
    assert index.lookup(query(route="a", uid="u1", rv="1")).author == "alice"
    assert index.lookup(query(route="b", uid="u1", rv="1")).tier == Tier.ABSENT
    assert index.lookup(query(route="a", uid="u9", rv="77")).tier == Tier.RESOURCE_VERSION
    assert index.lookup(query(route="b", uid="u9", rv="77")).tier == Tier.ABSENT


def test_exact_stays_per_version() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("bob", "update", name="a", uid="u1", rv="2")])
    assert index.lookup(query(uid="u1", rv="1")).author == "alice"
    assert index.lookup(query(uid="u1", rv="2")).author == "bob"
    assert index.lookup(removal(uid="u1", rv="9")).tier == Tier.ABSENT, "no delete fact yet"


def test_absent_past_ttl_then_sweep_reclaims() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], clock.ms)
    clock.now += 60
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.EXACT, "exactly at the cutoff is live"
    clock.now += 0.001
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT
    assert len(index) == 2
    assert index.sweep() == 2
    assert len(index) == 0
    assert index.scope_count() == 0


def test_fact_ages_from_append_time_not_read_time() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], clock.ms - 120_000)
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT


def test_future_append_time_is_clamped_to_now() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")], clock.ms + 3_600_000)
    clock.now += 61
    assert index.lookup(query(uid="u1", rv="1")).tier == Tier.ABSENT


def test_rewriting_one_key_keeps_two_entries_and_bounded_order() -> None:
    index = make_index()
    for _ in range(4000):
        index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="1")])
    assert len(index) == 2
    assert index.order_length(ROUTE, CM) <= 2 * 2 + 64
    index.sweep()
    assert index.order_length(ROUTE, CM) == 1


def test_per_type_cap_evicts_oldest_and_counts() -> None:
    index = make_index(max_facts_per_type=3, max_facts=100)
    for i in range(5):
        index.apply(ROUTE, CM, [fact("alice", "create", name=f"n{i}", rv=f"{i}")])
    assert index.scope_size(ROUTE, CM) == 3
    assert index.evictions == {"per_type": 2, "total": 0}
    assert index.lookup(query(uid="x", rv="0")).tier == Tier.ABSENT
    assert index.lookup(query(uid="x", rv="1")).tier == Tier.ABSENT
    assert index.lookup(query(uid="x", rv="2")).tier == Tier.RESOURCE_VERSION


def test_total_cap_evicts_from_the_largest_type() -> None:
    index = make_index(max_facts_per_type=10, max_facts=5)
    for i in range(4):
        index.apply(ROUTE, CM, [fact("alice", name=f"c{i}", rv=f"c{i}")])
    index.apply(ROUTE, DEPLOY, [fact("bob", name="d0", rv="d0")])
    assert index.evictions == {"per_type": 0, "total": 0}
    index.apply(ROUTE, DEPLOY, [fact("bob", name="d1", rv="d1")])
    assert index.evictions == {"per_type": 0, "total": 1}
    assert len(index) == 5
    assert index.scope_size(ROUTE, CM) == 3
    assert index.lookup(query(uid="x", rv="c0")).tier == Tier.ABSENT
    assert index.lookup(query(uid="x", rv="c1")).tier == Tier.RESOURCE_VERSION


def test_eviction_counts_entries_and_reaches_sticky_pointers() -> None:
    index = make_index(max_facts_per_type=3, max_facts=100)
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a", uid="u1", rv="5")])
    assert index.scope_size(ROUTE, CM) == 3
    index.apply(ROUTE, CM, [fact("bob", name="b", rv="9")])
    assert index.evictions["per_type"] == 1
    # exact went first; latest and the sticky pointer remain
    assert index.lookup(removal(uid="u1", rv="5")).tier == Tier.DELETE_STICKY
    index.apply(ROUTE, CM, [fact("carol", name="c", rv="10"), fact("dave", name="d", rv="11")])
    assert index.evictions["per_type"] == 3
    assert index.lookup(removal(uid="u1", rv="5")).tier == Tier.ABSENT


def test_collection_uid_membership_not_across_namespaces() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", ns="ns-1", uids=["u1", "u3"])])
    found = index.lookup(removal(uid="u1", rv="7", ns="ns-1", name="a"))
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_BODY_UID, "admin")
    assert index.lookup(removal(uid="u1", rv="7", ns="ns-2", name="a")).tier == Tier.ABSENT


def test_scope_selector_match_and_non_selected_labels_absent() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", selector="app=web")])
    assert index.lookup(removal(uid="u1", name="a", labels=LABELS)).tier == Tier.DELETECOLLECTION_SCOPE
    assert index.lookup(removal(uid="u1", name="a", labels={"app": "db"})).tier == Tier.ABSENT


def test_invalid_selector_never_scope_matches_but_uid_set_still_answers() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", selector="app in (", uids=["u1"])])
    assert index.lookup(removal(uid="u2", name="b", labels=LABELS)).tier == Tier.ABSENT
    assert index.lookup(removal(uid="u1", name="a", labels=LABELS)).tier == Tier.DELETECOLLECTION_BODY_UID


def test_exact_capable_never_reaches_collection_tiers() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u1"])])
    assert index.lookup(query(uid="u1", rv="3", name="a", labels=LABELS)).tier == Tier.ABSENT


def test_empty_selector_is_the_whole_namespace() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", selector="")])
    assert index.lookup(removal(uid="u1", name="a")).tier == Tier.DELETECOLLECTION_SCOPE
    assert index.lookup(removal(uid="u1", name="a", ns="other")).tier == Tier.ABSENT


def test_scope_stops_at_the_window_measured_from_stage_timestamp() -> None:
    clock = Clock()
    index = make_index(clock, collection_window_s=30)
    stage_us = int((clock.now - 10) * 1_000_000)
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", stage_us=stage_us)])
    clock.now += 20
    assert index.lookup(removal(uid="u1", name="a")).tier == Tier.DELETECOLLECTION_SCOPE
    clock.now += 0.001
    assert index.lookup(removal(uid="u1", name="a")).tier == Tier.ABSENT


def test_scope_window_falls_back_to_append_time() -> None:
    clock = Clock()
    index = make_index(clock, collection_window_s=2)  # not the default 30 s: the setting is used
    index.apply(ROUTE, CM, [fact("admin", "deletecollection")], clock.ms)
    clock.now += 2
    assert index.lookup(removal(uid="u1", name="a")).tier == Tier.DELETECOLLECTION_SCOPE
    clock.now += 0.001
    assert index.lookup(removal(uid="u1", name="a")).tier == Tier.ABSENT


def test_a_latest_write_does_not_block_the_scope_tier() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("admin", "deletecollection")])
    found = index.lookup(removal(uid="u1", rv="2", name="a"))
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_SCOPE, "admin")


def test_collection_uid_outranks_a_stale_write() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u1"])])
    found = index.lookup(removal(uid="u1", rv="2", name="a"))
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_BODY_UID, "admin")


def test_unjoinable_fact_is_not_stored() -> None:
    index = make_index()
    index.apply(
        ROUTE,
        CM,
        [
            AuthorFact("ghost", verb="create", namespace="ns-1"),
            fact("alice", "create", name="a", uid="u1", rv="1"),
        ],
    )
    assert len(index) == 2


def test_entry_cost_per_kind_of_fact() -> None:
    index = make_index()
    costs = [
        (fact(verb="update", name="a", uid="u1", rv="1"), 2),
        (fact(verb="delete", name="b", uid="u2", rv="2"), 3),
        (fact(verb="delete", name="c", uid="u3"), 2),
        (fact(verb="update", name="d", uid="u4"), 1),
        (fact(verb="update", rv="5"), 1),
        (fact(verb="update", name="e"), 1),
        (fact(verb="deletecollection"), 1),
    ]
    for item, cost in costs:
        assert index.apply(ROUTE, CM, [item]) == cost


def test_name_tier_joins_uid_and_rv_less_facts_within_namespace() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("aggr", "create", name="fl-1")])
    assert index.lookup(query(uid="u1", rv="1", name="fl-1")).tier == Tier.NAME
    assert index.lookup(query(uid="u1", rv="1", name="fl-1", ns="ns-2")).tier == Tier.ABSENT


def test_name_tier_ranks_below_uid_tiers() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("aggr", "create", name="a")])
    index.apply(ROUTE, CM, [fact("alice", "create", name="a", uid="u1", rv="1")])
    assert index.lookup(query(uid="u1", rv="1", name="a")).tier == Tier.EXACT


def test_name_tier_resolves_aggregated_removals() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("remover", "delete", name="fl-1")])
    found = index.lookup(removal(uid="u1", rv="4", name="fl-1"))
    assert (found.tier, found.author) == (Tier.NAME, "remover")


def test_only_a_name_keyed_delete_answers_a_removal_by_name() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("editor", "update", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("namewriter", "update", name="a")])
    assert index.lookup(removal(uid="u1", rv="2", name="a")).tier == Tier.ABSENT
    index.apply(ROUTE, CM, [fact("deleter", "delete", name="a")])
    found = index.lookup(removal(uid="u1", rv="2", name="a"))
    assert (found.tier, found.author) == (Tier.NAME, "deleter")


def test_uid_keyed_delete_beats_name_keyed_delete() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("uid-deleter", "delete", name="a", uid="u1")])
    index.apply(ROUTE, CM, [fact("name-deleter", "delete", name="a")])
    found = index.lookup(removal(uid="u1", rv="2", name="a"))
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "uid-deleter")


def test_removal_pointer_outlives_ttl() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    index.apply(ROUTE, CM, [fact("deleter", "delete", name="a", uid="u1", rv="5")], clock.ms)
    clock.now += 120
    assert index.sweep() == 2
    assert len(index) == 1
    found = index.lookup(removal(uid="u1", rv="6", name="a"))
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "deleter")
    assert index.lookup(query(uid="u1", rv="5", name="a")).tier == Tier.ABSENT


def test_recreated_name_does_not_inherit_the_previous_deleter() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("deleter", "delete", name="a", uid="u1", rv="5")])
    assert index.lookup(removal(uid="u2", rv="9", name="a")).tier == Tier.ABSENT
    assert index.lookup(query(uid="u2", rv="8", name="a")).tier == Tier.ABSENT


def test_latest_and_resource_version_are_distinct_tiers() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="1")])
    index.apply(ROUTE, CM, [fact("rvwriter", "update", rv="2")])
    assert index.lookup(removal(uid="u1", rv="2")).tier == Tier.ABSENT, "writes never answer a removal"
    assert index.lookup(query(uid="u1", rv="2")).tier == Tier.RESOURCE_VERSION
    index.apply(ROUTE, CM, [fact("alice", "delete", name="a", uid="u1", rv="3")])
    assert index.lookup(removal(uid="u1", rv="2")).tier == Tier.DELETE_STICKY


def test_uid_fact_is_not_filed_under_rv_or_name_and_rv_beats_name() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv="1")])
    assert index.lookup(query(uid="u2", rv="1", name="a")).tier == Tier.ABSENT
    index.apply(ROUTE, CM, [fact("rvname", "update", name="b", rv="3")])
    assert index.lookup(query(uid="u3", rv="4", name="b")).tier == Tier.ABSENT


def test_finalizer_collision_keeps_the_deleter_in_both_publish_orders() -> None:
    delete = fact("human", "delete", name="a", uid="u1", rv="5")
    finalizer = fact("system:serviceaccount:ops:finalizer", "patch", name="a", uid="u1", rv="5")
    for order in ([delete, finalizer], [finalizer, delete]):
        index = make_index()
        for item in order:
            index.apply(ROUTE, CM, [item])
        found = index.lookup(removal(uid="u1", rv="5", name="a"))
        assert (found.tier, found.author) == (Tier.DELETE_STICKY, "human")


def test_trap8_an_exact_write_never_answers_a_removal_and_collection_evidence_does() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("system:serviceaccount:ops:finalizer", "patch", name="a", uid="u1", rv="5")])
    assert index.lookup(removal(uid="u1", rv="5", name="a")).tier == Tier.ABSENT
    index.apply(ROUTE, CM, [fact("admin", "deletecollection", uids=["u1"])])
    found = index.lookup(removal(uid="u1", rv="5", name="a"))
    assert (found.tier, found.author) == (Tier.DELETECOLLECTION_BODY_UID, "admin")
    assert index.lookup(query(uid="u1", rv="5", name="a")).tier == Tier.EXACT


def test_an_exact_write_does_not_block_the_collection_scope() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("finalizer", "patch", name="a", uid="u1", rv="5")])
    index.apply(ROUTE, CM, [fact("admin", "deletecollection")])
    assert index.lookup(removal(uid="u1", rv="5", name="a")).tier == Tier.DELETECOLLECTION_SCOPE


def test_actor_kind_derivation() -> None:
    assert actor_kind("") == "none"
    assert actor_kind("system:serviceaccount:kube-system:generic-garbage-collector") == "serviceaccount"
    assert actor_kind("system:admin") == "user"
    assert actor_kind("alice@example.com") == "user"


def test_name_tier_never_credits_a_write_stamped_after_the_event_was_seen() -> None:
    # Found by the chaos run with admission facts (seed 583021): the robot's create had no fact (its
    # review died with a killed replica), and bob's scale of the same Deployment 27 s later, a fact
    # by name only, named bob as the creator. A later request on the name is never the author.
    index = make_index()
    seen_ms = 1_700_000_000_000
    index.apply(ROUTE, DEPLOY, [fact("bob", "update", name="web", stage_us=(seen_ms + 27_000) * 1000)])
    create = query(uid="u1", rv="5", name="web", gr=DEPLOY)
    assert index.lookup(create._replace(event_ms=seen_ms)).tier == Tier.ABSENT
    # the watch may see the change a moment before its response completes: within the margin it counts
    assert index.lookup(create._replace(event_ms=seen_ms + 27_000 - NAME_STAMP_MARGIN_MS)).tier == Tier.NAME
    assert (
        index.lookup(create._replace(event_ms=seen_ms + 27_000 - NAME_STAMP_MARGIN_MS - 1)).tier
        == Tier.ABSENT
    )
    # with no observation time (a recording) the name tier answers as before
    assert (index.lookup(create).tier, index.lookup(create).author) == (Tier.NAME, "bob")


def test_the_creator_is_the_create_fact_while_it_is_the_newest_for_its_uid() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=60)
    assert index.creator(ROUTE, CM, "u1") is None, "nothing filed"
    index.apply(ROUTE, CM, [fact("alice", "create", name="req", uid="u1", rv="5")])
    created = index.creator(ROUTE, CM, "u1")
    assert created is not None
    assert (created.identity.author, created.verb) == ("alice", "create")
    assert index.creator(ROUTE, CM, "u2") is None, "another uid"
    index.apply(ROUTE, CM, [fact("bob", "update", name="req", uid="u1", rv="6")])
    assert index.creator(ROUTE, CM, "u1") is None, "a later write is newer than the create"
    index.apply(ROUTE, CM, [fact("carol", "create", name="other", uid="u3", rv="7")])
    clock.now += 61
    assert index.creator(ROUTE, CM, "u3") is None, "past the TTL"


def test_deletion_candidates_name_each_object_by_namespace_and_name() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "delete", ns="team-a", name="gone", uid="u1", rv="9")])
    assert index.deletion_candidates(ROUTE, CM, "team-a") == [("u1", "team-a", "gone")]
    assert index.deletion_candidates(ROUTE, CM, "team-b") == []
