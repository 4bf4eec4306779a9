"""The `admission` tier: facts that name a version by its content key (pipeline.facts.admission).

An admission fact is filed like an audit fact whose resourceVersion is the content key, so it
shares the exact slots' trust rules (a second user claiming the same version is a conflict); the
lookup reads it after `exact` and holds the two sources to agree.
"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from pipeline.attribution import FactQuery, Resolver, Tier
from pipeline.content.key import content_key
from tests.attribution.helpers import CM, ROUTE, Clock, fact, make_index, query, removal

KEY = content_key(b'{"data":{"k":"v"}}')
OTHER = content_key(b'{"data":{"k":"w"}}')


def admitted(uid: str = "u1", key: str = "", **kwargs: str) -> FactQuery:
    return query(uid=uid, **kwargs)._replace(content_key=key)


def test_the_admission_fact_of_the_same_content_names_the_version() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv=KEY)])
    found = index.lookup(admitted(rv="812", key=KEY, name="a"))
    assert (found.tier, found.author) == (Tier.ADMISSION, "alice")
    assert index.lookup(admitted(rv="812", key=OTHER, name="b")).tier == Tier.ABSENT
    assert index.lookup(admitted(uid="u2", rv="812", key=KEY, name="b")).tier == Tier.ABSENT, "another object"
    # the same content key without the uid's admission fact is nothing; a query without a key neither
    assert index.lookup(query(uid="u1", rv="812", name="b")).tier == Tier.ABSENT


def test_a_removal_is_never_answered_by_a_write_of_the_same_content() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", name="a", uid="u1", rv=KEY)])
    assert index.lookup(removal(uid="u1", rv="9", name="a")._replace(content_key=KEY)).tier == Tier.ABSENT
    index.apply(ROUTE, CM, [fact("bob", "delete", name="a", uid="u1")])
    found = index.lookup(removal(uid="u1", rv="9", name="a"))
    assert (found.tier, found.author) == (Tier.DELETE_STICKY, "bob")


def test_two_users_writing_the_same_content_is_a_conflict_never_a_guess() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", uid="u1", rv=KEY)])
    index.apply(ROUTE, CM, [fact("alice", "update", uid="u1", rv=KEY)])  # a retry: still alice
    assert index.lookup(admitted(rv="5", key=KEY)).author == "alice"
    index.apply(ROUTE, CM, [fact("mallory", "update", uid="u1", rv=KEY)])
    found = index.lookup(admitted(rv="5", key=KEY))
    assert found.tier == Tier.CONFLICT
    assert {c.identity.author for c in found.candidates} == {"alice", "mallory"}


def test_audit_and_admission_must_agree() -> None:
    index = make_index()
    index.apply(ROUTE, CM, [fact("alice", "update", uid="u1", rv="812")])  # audit: the stored version
    index.apply(ROUTE, CM, [fact("alice", "update", uid="u1", rv=KEY)])  # admission: its content
    assert index.lookup(admitted(rv="812", key=KEY)).tier == Tier.EXACT
    index.apply(ROUTE, CM, [fact("bob", "update", uid="u1", rv=OTHER)])
    found = index.lookup(admitted(rv="812", key=OTHER))
    assert found.tier == Tier.CONFLICT, "audit says alice, admission says bob"
    assert {c.identity.author for c in found.candidates} == {"alice", "bob"}


def test_an_admission_fact_arriving_during_the_grace_wakes_the_resolution() -> None:
    async def scenario() -> None:
        index = make_index(Clock())
        resolver = Resolver(index, grace_ms=5000)
        pending = asyncio.ensure_future(resolver.resolve(admitted(rv="812", key=KEY, name="a")))
        await asyncio.sleep(0.05)
        assert not pending.done()
        index.apply(ROUTE, CM, [fact("carol", "create", name="a", uid="u1", rv=KEY)])
        found = await asyncio.wait_for(pending, 1.0)
        assert (found.tier, found.author) == (Tier.ADMISSION, "carol")

    asyncio.run(scenario())


@given(
    writes=st.lists(
        st.tuples(st.sampled_from(["alice", "bob", "carol"]), st.sampled_from(["k1", "k2", "k3"])), max_size=8
    ),
    asked=st.sampled_from(["k1", "k2", "k3"]),
)
def test_the_tier_follows_the_model(writes: list[tuple[str, str]], asked: str) -> None:
    """Model: a content key named by one user only is that user's; by two or more, a conflict; by
    nobody, absent. Nothing else (order, repeats, other keys) changes the answer."""
    index = make_index()
    for author, key in writes:
        index.apply(ROUTE, CM, [fact(author, "update", uid="u1", rv=content_key(key.encode()))])
    claimants = {author for author, key in writes if key == asked}
    found = index.lookup(admitted(rv="999", key=content_key(asked.encode())))
    if not claimants:
        assert found.tier == Tier.ABSENT
    elif len(claimants) == 1:
        assert (found.tier, found.author) == (Tier.ADMISSION, claimants.pop())
    else:
        assert found.tier == Tier.CONFLICT
