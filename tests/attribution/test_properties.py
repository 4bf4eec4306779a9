"""Hypothesis: the index agrees with a naive model on tiers, TTL, caps, evictions and routes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.attribution import FactQuery, Tier
from pipeline.attribution.model import is_removal_verb
from pipeline.codec.fact_batch import AuthorFact
from pipeline.models import GroupResource
from tests.attribution.helpers import Clock, make_index
from tests.attribution.oracle import Oracle

TTL_S = 60
WINDOW_S = 30
GRS = [GroupResource("", "configmaps"), GroupResource("apps", "deployments")]
ROUTES = ["a", "b"]

facts = st.builds(
    AuthorFact,
    author=st.sampled_from(["alice", "bob", "system:serviceaccount:x:y", "carol"]),
    verb=st.sampled_from(["create", "update", "patch", "delete", "DELETE", "deletecollection"]),
    audit_id=st.just(""),
    namespace=st.sampled_from(["n1", "n2"]),
    name=st.sampled_from(["", "a", "b"]),
    uid=st.sampled_from(["", "u1", "u2"]),
    resource_version=st.sampled_from(["", "1", "2", "3"]),
    stage_timestamp_us=st.just(0),
    label_selector=st.sampled_from([None, "", "app=web", "app!=web", "app in (", "!app"]),
    uids=st.sampled_from([None, ["u1"], ["u2", "u1"], ["u3"]]),
)

apply_op = st.tuples(
    st.just("apply"),
    st.sampled_from(["a", "a", "a", "b"]),
    st.sampled_from([GRS[0], GRS[0], GRS[0], GRS[1]]),
    st.lists(facts, min_size=1, max_size=3),
    # append time relative to now: around the TTL boundary, in the past and (clamped) future
    st.sampled_from([-120_000, -60_001, -60_000, -59_999, -30_000, -1, 0, 500]),
)
advance_op = st.tuples(st.just("advance"), st.sampled_from([0, 1, 10_000, 29_999, 30_000, 30_001, 60_000]))
sweep_op = st.tuples(st.just("sweep"))
operations = st.lists(st.one_of(apply_op, apply_op, apply_op, advance_op, sweep_op), max_size=40)

queries = st.builds(
    FactQuery,
    route=st.sampled_from(["a", "a", "a", "b"]),
    group_resource=st.sampled_from([GRS[0], GRS[0], GRS[0], GRS[1]]),
    uid=st.sampled_from(["", "u1", "u2"]),
    resource_version=st.sampled_from(["", "1", "2", "3"]),
    namespace=st.sampled_from(["n1", "n1", "n2"]),
    name=st.sampled_from(["", "a", "a", "b"]),
    labels=st.sampled_from([{}, {"app": "web"}, {"app": "db"}]),
    exact_capable=st.booleans(),
    # the model is the audit tiers': builds() would otherwise draw a content key, which could equal
    # an audit fact's resourceVersion and answer by the admission tier (tests/attribution/
    # test_admission_tier.py models that one); a real content key is a digest, never an rv
    content_key=st.just(""),
)


def run(ops: list[tuple[Any, ...]], per_type: int, total: int) -> tuple[Any, Oracle, Clock]:
    clock = Clock()
    index = make_index(
        clock, ttl_s=TTL_S, max_facts_per_type=per_type, max_facts=total, collection_window_s=WINDOW_S
    )
    oracle = Oracle(TTL_S * 1000, per_type, total, WINDOW_S * 1000)
    for op in ops:
        if op[0] == "apply":
            _, route, gr, batch, offset = op
            at = clock.ms + offset
            index.apply(route, gr, batch, at)
            oracle.apply(route, gr.key, batch, min(at, clock.ms) if at > 0 else clock.ms)
        elif op[0] == "advance":
            clock.now += op[1] / 1000
        else:
            index.sweep()
            oracle.sweep(clock.ms)
    return index, oracle, clock


def expected(oracle: Oracle, q: FactQuery, now: int) -> tuple[str, str]:
    tier, fact = oracle.lookup(
        q.route,
        q.group_resource.key,
        q.uid,
        q.resource_version,
        q.namespace,
        q.name,
        dict(q.labels),
        q.exact_capable,
        now,
    )
    return tier, fact.author if fact is not None else ""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, probes=st.lists(queries, min_size=1, max_size=16))
def test_tier_precedence_and_ttl_match_the_model(ops: list[tuple[Any, ...]], probes: list[FactQuery]) -> None:
    index, oracle, clock = run(ops, per_type=10_000, total=100_000)
    for q in probes:
        got = index.lookup(q)
        assert (got.tier, got.author) == expected(oracle, q, clock.ms), q


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=operations,
    per_type=st.integers(min_value=1, max_value=6),
    extra=st.integers(min_value=0, max_value=6),
    probes=st.lists(queries, min_size=1, max_size=6),
)
def test_caps_and_eviction_accounting_match_the_model(
    ops: list[tuple[Any, ...]], per_type: int, extra: int, probes: list[FactQuery]
) -> None:
    total = per_type + extra
    index, oracle, clock = run(ops, per_type=per_type, total=total)
    assert len(index) == oracle.total <= total
    assert index.evictions == oracle.evictions
    for route in ROUTES:
        for gr in GRS:
            assert index.scope_size(route, gr) <= per_type
    for q in probes:
        got = index.lookup(q)
        assert (got.tier, got.author) == expected(oracle, q, clock.ms), q


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, probes=st.lists(queries, min_size=1, max_size=16))
def test_no_tier_names_the_actor_of_another_kind_of_operation(
    ops: list[tuple[Any, ...]], probes: list[FactQuery]
) -> None:
    """A removal is only ever credited to a delete/deletecollection, a write only to a write.

    Whatever the facts (late, missing, evicted, conflicting), the last editor or a finalizer's patch
    never becomes the deleter, and a delete never becomes the writer of a version.
    """
    index, _, _ = run(ops, per_type=10_000, total=100_000)
    for q in probes:
        got = index.lookup(q)
        if got.fact is not None:
            assert is_removal_verb(got.fact.verb) == (not q.exact_capable), (q, got)


@settings(max_examples=200, deadline=None)
@given(ops=operations, probes=st.lists(queries, min_size=1, max_size=16))
def test_expired_facts_never_answer_except_the_sticky_pointer(
    ops: list[tuple[Any, ...]], probes: list[FactQuery]
) -> None:
    index, _, clock = run(ops, per_type=10_000, total=100_000)
    for q in probes:
        got = index.lookup(q)
        if got.fact is not None and got.tier != Tier.DELETE_STICKY:
            assert got.fact.at_ms >= clock.ms - TTL_S * 1000


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(facts, min_size=1, max_size=3), max_size=10), probes=st.lists(queries))
def test_route_isolation(batches: list[list[AuthorFact]], probes: list[FactQuery]) -> None:
    index = make_index()
    for batch in batches:
        index.apply("a", GRS[0], batch)
    for q in probes:
        if q.route != "a" or q.group_resource != GRS[0]:
            assert index.lookup(q).tier == Tier.ABSENT
