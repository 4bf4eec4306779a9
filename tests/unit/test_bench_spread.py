"""The pure parts of `make bench spread`: the types it watches really land in distinct shards, the
Lease holders map to the replicas by pid, and the spread figures are what they say."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bench_spread import CANDIDATES, SEQ_PATTERN, SHARDED
from bench.spread import Spread, dealt_out, holder_replica, spread_of, types_per_shard
from pipeline.watch.shards import shard_of


def _shard(kind: str, shards: int) -> int:
    group, _, resource = kind.rpartition("/")
    return shard_of(group, resource, shards)


def test_the_bench_types_fill_every_shard_once() -> None:
    chosen = types_per_shard(CANDIDATES, SHARDED)
    assert sorted(chosen) == list(range(SHARDED))
    assert len(set(chosen.values())) == SHARDED
    for shard, kind in chosen.items():
        assert _shard(kind, SHARDED) == shard


def test_the_first_candidate_of_a_shard_wins() -> None:
    kinds = ["configmaps", "endpoints", "pods"]  # all three in one shard of 3, checked below
    assert {_shard(k, 3) for k in kinds} == {_shard("configmaps", 3)}
    assert types_per_shard([*kinds, "secrets", "services"], 3)[_shard("configmaps", 3)] == "configmaps"


def test_a_shard_no_candidate_reaches_is_refused() -> None:
    with pytest.raises(ValueError, match="no candidate type lands in shard"):
        types_per_shard(["configmaps"], 3)


@given(st.lists(st.sampled_from(CANDIDATES), min_size=1), st.integers(min_value=1, max_value=4))
def test_every_chosen_type_is_in_its_shard(candidates: list[str], shards: int) -> None:
    try:
        chosen = types_per_shard(candidates, shards)
    except ValueError:
        assert len({_shard(k, shards) for k in candidates}) < shards
        return
    assert all(_shard(kind, shards) == shard for shard, kind in chosen.items())


def test_a_holder_maps_to_the_replica_by_its_pid() -> None:
    pids: list[int | None] = [101, 202, None]
    assert holder_replica("host-a-202-1f2e3d4c", pids) == 1
    assert holder_replica("node-101-abcdef01", pids) == 0


@pytest.mark.parametrize("holder", ["", "e2e-0", "host-303-abcdef01", "host-x1-abcdef01", "abcdef01"])
def test_an_unknown_holder_maps_to_no_replica(holder: str) -> None:
    assert holder_replica(holder, [101, 202, None]) is None


def test_the_spread_of_two_readings() -> None:
    spread = spread_of({0: 1.0, 1: 2.0, 2: 3.0}, {0: 4.0, 1: 3.0, 2: 5.0})
    assert spread.cpu_s == (3.0, 1.0, 2.0)
    assert spread.total_s == 6.0
    assert spread.busiest_share == 0.5
    assert spread.max_over_min == 3.0


def test_an_even_spread_is_one_nth_and_one() -> None:
    spread = Spread((2.0, 2.0, 2.0))
    assert spread.busiest_share == pytest.approx(1 / 3)
    assert spread.max_over_min == 1.0


def test_an_idle_replica_makes_max_over_min_infinite_and_no_work_makes_it_undefined() -> None:
    assert Spread((0.0, 2.0)).max_over_min == math.inf
    assert math.isnan(Spread((0.0, 0.0)).max_over_min)
    assert math.isnan(Spread((0.0, 0.0)).busiest_share)


def test_readings_of_other_replicas_or_a_restart_are_refused() -> None:
    with pytest.raises(ValueError, match="different replicas"):
        spread_of({0: 1.0}, {1: 1.0})
    with pytest.raises(ValueError, match="went down"):
        spread_of({0: 5.0}, {0: 1.0})


def test_shards_are_dealt_out_once_each_is_held_by_as_many_replicas_as_can() -> None:
    assert dealt_out({0: 2, 1: 0, 2: 1}, 3)
    assert dealt_out({0: 1}, 3)
    assert dealt_out({0: 0, 1: 1, 2: 0, 3: 1}, 2)
    assert not dealt_out({0: 2, 1: 2, 2: 2}, 3)  # a cold start's first replica took them all
    assert not dealt_out({0: 2, 1: None, 2: 1}, 3)
    assert not dealt_out({}, 3)


@pytest.mark.parametrize(
    ("line", "seq"),
    [("    bench/seq: '1000042'", 1000042), ('    bench/seq: "7"', 7), ("    bench/seq: 9", 9)],
)
def test_the_patch_number_is_read_from_every_yaml_quoting(line: str, seq: int) -> None:
    found = SEQ_PATTERN.search(line)
    assert found is not None
    assert int(found.group(1)) == seq


def test_a_payload_or_another_annotation_is_no_patch_number() -> None:
    assert SEQ_PATTERN.search("    bench/payload: xxxx") is None
    assert SEQ_PATTERN.search("    other/seq: '5'") is None
