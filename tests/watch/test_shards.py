"""The pure decisions of sharded watching: which shard watches a type, who should hold a shard."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.config import ConfigError, load_settings
from pipeline.watch.shards import (
    ORPHAN_AFTER_DURATIONS,
    ShardStanding,
    assign_shards,
    may_take,
    shard_key,
    shard_lease_name,
    shard_of,
)

identities = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)
members_sets = st.sets(identities, min_size=1, max_size=9)
shard_counts = st.integers(min_value=1, max_value=64)


def test_a_type_has_the_same_shard_in_every_process() -> None:
    # pinned values: the hash is blake2b, not Python's per-process salted hash()
    assert [
        shard_of("apps", "deployments", 4),
        shard_of("", "configmaps", 4),
        shard_of("", "secrets", 7),
    ] == [
        0,
        2,
        1,
    ]
    assert shard_of("", "configmaps", 1) == 0
    assert {shard_of("g", f"r{i}", 8) for i in range(200)} == set(range(8))


def test_zero_shards_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("", "configmaps", 0)


def test_an_unsharded_cluster_keeps_its_lease_and_names() -> None:
    assert shard_lease_name("reverser-watch-src", 0, 1) == "reverser-watch-src"
    assert shard_key("src", 0, 1) == "src"
    assert shard_lease_name("reverser-watch-src", 2, 4) == "reverser-watch-src-shard-2"
    assert shard_key("src", 2, 4) == "src/shard-2"


@given(shards=shard_counts, members=members_sets)
def test_every_shard_has_one_live_owner_and_the_spread_is_even(shards: int, members: set[str]) -> None:
    assignment = assign_shards("lease", shards, members)
    assert sorted(assignment) == list(range(shards))
    assert set(assignment.values()) <= members
    counts = Counter(assignment.values())
    held = [counts.get(m, 0) for m in members]
    assert max(held) - min(held) <= 1
    if shards >= len(members):
        assert min(held) >= 1  # every replica's CPU is used


@given(shards=shard_counts, members=members_sets, order=st.randoms())
def test_every_replica_computes_the_same_assignment(shards: int, members: set[str], order: object) -> None:
    listed = sorted(members)
    order.shuffle(listed)  # type: ignore[attr-defined]
    assert assign_shards("lease", shards, listed) == assign_shards("lease", shards, sorted(members))


@given(shards=st.integers(min_value=2, max_value=32), members=st.sets(identities, min_size=2, max_size=6))
# dealt in shard order with member-ordered extras, this moved 4 shards besides the leaver's 9
@example(shards=26, members={"622d78", "3", "0000"})
def test_a_replica_leaving_moves_its_shards_and_few_others(shards: int, members: set[str]) -> None:
    before = assign_shards("lease", shards, members)
    gone = sorted(members)[0]
    after = assign_shards("lease", shards, members - {gone})
    assert gone not in after.values()
    moved = [s for s in range(shards) if before[s] != after[s]]
    held_by_gone = [s for s in range(shards) if before[s] == gone]
    assert set(held_by_gone) <= set(moved)
    # the quotas change by at most one per member, so at most that many others move as well
    assert len(moved) <= len(held_by_gone) + len(members)


def test_no_members_no_assignment() -> None:
    assert assign_shards("lease", 4, []) == {}


def test_the_assigned_replica_takes_a_vacant_shard_at_once_others_only_once_it_is_orphaned() -> None:
    assignment = {0: "a", 1: "b"}
    assert may_take(0, "a", assignment, vacant_s=0.0, duration_s=10.0)
    assert not may_take(0, "b", assignment, vacant_s=10.0 * ORPHAN_AFTER_DURATIONS - 0.1, duration_s=10.0)
    assert may_take(0, "b", assignment, vacant_s=10.0 * ORPHAN_AFTER_DURATIONS, duration_s=10.0)
    assert not may_take(2, "a", assignment, vacant_s=0.0, duration_s=10.0)


def standing(identity: str, shard: int, members: set[str], *, listed: bool = True) -> ShardStanding:
    return ShardStanding(identity, "lease", shard, 4, 10.0, lambda: members, lambda: listed)


def test_a_standing_follows_the_assignment_of_the_live_members() -> None:
    members = {"a", "b"}
    owners = assign_shards("lease", 4, members)
    for shard, owner in owners.items():
        other = ({"a", "b"} - {owner}).pop()
        assert standing(owner, shard, members).may_take(0.0)
        assert standing(owner, shard, members).may_keep()
        assert not standing(other, shard, members).may_take(0.0)
        assert not standing(other, shard, members).may_keep()


def test_before_its_first_listing_a_replica_takes_only_orphans_and_gives_nothing_up() -> None:
    alone = standing("a", 0, {"a"}, listed=False)
    assert not alone.may_take(0.0)
    assert not alone.may_take(10.0 * ORPHAN_AFTER_DURATIONS - 0.1)
    assert alone.may_take(10.0 * ORPHAN_AFTER_DURATIONS)  # a roster it cannot read must not stop it
    assert alone.may_keep()


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ("{name: c, watch_shards: 2}", r"clusters\.0: .*watch_shards > 1 needs leader_election"),
        (
            "{name: c, leader_election: true, watch_shards: 0}",
            r"clusters\.0\.watch_shards: .*greater than or equal to 1",
        ),
        (
            "{name: c, leader_election: true, watch_shards: 65}",
            r"clusters\.0\.watch_shards: .*less than or equal to 64",
        ),
    ],
)
def test_bad_shard_counts_are_named(tmp_path: Path, cluster: str, message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"clusters: [{cluster}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_settings(config, environ={})


def test_a_sharded_cluster_with_leader_election_loads(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("clusters: [{name: c, leader_election: true, watch_shards: 4}]\n", encoding="utf-8")
    assert load_settings(config, environ={}).clusters[0].watch_shards == 4
