"""Lag in seconds from the (log-end offset, time) history: exactness cases and accuracy bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.lag.evaluator import offset_lag
from pipeline.lag.history import EndOffsetHistories
from pipeline.log.api import TopicPartition

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


class One:
    """One partition's view of the shared histories, so the cases read as (offset, time) points."""

    def __init__(self, capacity: int) -> None:
        self.histories = EndOffsetHistories(capacity)

    def __len__(self) -> int:
        return self.histories.points(TP)

    def record(self, end: int, now_ms: int) -> None:
        self.histories.record({TP: end}, now_ms)

    def end_at(self, at_ms: int) -> int | None:
        return self.histories.end_at(TP, at_ms)

    def lag_seconds(self, committed: int, now_ms: int) -> float | None:
        return self.histories.lag_seconds(TP, committed, now_ms)


def test_unknown_without_points_and_zero_when_caught_up() -> None:
    h = One(10)
    assert h.lag_seconds(5, 1000) is None
    h.record(100, 1000)
    assert h.lag_seconds(100, 5000) == 0.0
    assert h.lag_seconds(150, 5000) == 0.0


def test_one_point_cannot_place_an_older_offset_in_time() -> None:
    h = One(10)
    h.record(100, 1000)
    assert h.lag_seconds(40, 5000) is None


def test_interpolates_between_points() -> None:
    h = One(10)
    h.record(0, 0)
    h.record(100, 10_000)
    h.record(200, 20_000)
    # the log end stood at 150 halfway between the last two polls
    assert h.lag_seconds(150, 30_000) == pytest.approx(15.0)


def test_extrapolates_before_the_oldest_point_at_the_average_rate() -> None:
    h = One(10)
    h.record(100, 10_000)
    h.record(200, 20_000)
    assert h.lag_seconds(50, 20_000) == pytest.approx(15.0)


def test_a_burst_after_a_quiet_period_is_placed_between_the_polls_around_it() -> None:
    h = One(20)
    h.record(100, 0)
    for t in range(1, 10):
        h.record(100, t * 1000)
    h.record(200, 10_000)
    assert len(h) == 11
    # records 100..199 arrived between the polls at 9 s and 10 s
    assert h.lag_seconds(100, 10_000) == pytest.approx(1.0)
    assert h.end_at(5_000) == 100
    assert h.end_at(9_500) == 150
    assert h.end_at(60_000) == 200
    assert h.end_at(-1) == 100


def test_a_shrinking_log_end_restarts_the_history() -> None:
    h = One(10)
    h.record(500, 0)
    h.record(600, 1000)
    h.record(20, 2000)
    assert len(h) == 1
    assert h.lag_seconds(0, 3000) is None


def test_partitions_share_the_poll_times_and_keep_only_their_own_points() -> None:
    h = EndOffsetHistories(4)
    h.record({TP: 0}, 0)
    h.record({TP: 10}, 1000)
    h.record({TP: 20, OTHER: 500}, 2000)  # OTHER appears at the third poll
    h.record({TP: 30, OTHER: 600}, 3000)
    assert (h.points(TP), h.points(OTHER)) == (4, 2)
    assert h.end_at(OTHER, 2500) == 550
    assert h.lag_seconds(OTHER, 500, 3000) == 1.0
    assert h.lag_seconds(TP, 5, 3000) == 2.5
    h.record({OTHER: 700}, 4000)  # TP is gone (topic deleted): its points are dropped
    assert TP not in h
    assert h.points(OTHER) == 3


def test_offsets_beyond_32_bits_are_exact_and_a_huge_step_restarts() -> None:
    h = One(10)
    base = 5 * 2**32 + 7
    h.record(base, 0)
    h.record(base + 2**32 - 1, 1000)
    assert h.end_at(1000) == base + 2**32 - 1
    assert h.lag_seconds(base, 1000) == 1.0
    h.record(base + 2**33, 2000)  # one poll grew by more than a 32-bit step: start over
    assert len(h) == 1
    assert h.end_at(0) == base + 2**33


def test_capacity_bounds_the_points() -> None:
    h = One(4)
    for i in range(100):
        h.record(i * 10, i * 1000)
    assert len(h) == 4
    assert h.end_at(0) == 960


@given(st.integers(-(10**6), 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_offset_lag_is_never_negative(committed: int, start: int, end_delta: int) -> None:
    end = start + end_delta
    lag, lost = offset_lag(committed, start, end)
    assert lag >= 0
    assert lost >= 0
    assert lag == max(0, end - committed)
    assert lost <= lag or committed >= end


@st.composite
def producer_runs(draw: st.DrawFn) -> tuple[list[int], int, int]:
    """Append times (ms, sorted) of every record, a poll interval, and the observation span."""
    poll_ms = draw(st.integers(100, 5000))
    polls = draw(st.integers(2, 40))
    span = poll_ms * polls
    times = sorted(draw(st.lists(st.integers(1, span), min_size=1, max_size=300)))
    return times, poll_ms, polls


@given(producer_runs(), st.data())
def test_lag_seconds_is_within_one_poll_interval_of_the_truth(
    run: tuple[list[int], int, int], data: st.DataObject
) -> None:
    appended, poll_ms, polls = run
    h = One(2 * polls + 2)
    for i in range(polls + 1):
        now = i * poll_ms
        h.record(sum(1 for t in appended if t <= now), now)
    now = polls * poll_ms
    end = len(appended)
    committed = data.draw(st.integers(0, end))
    estimate = h.lag_seconds(committed, now)
    assert estimate is not None
    assert estimate >= 0
    truth_s = 0.0 if committed >= end else (now - appended[committed]) / 1000.0
    assert abs(estimate - truth_s) <= poll_ms / 1000.0 + 1e-9


@given(st.lists(st.integers(0, 50), min_size=2, max_size=30), st.integers(0, 2000))
def test_lag_seconds_never_negative_and_shrinks_as_the_consumer_advances(
    steps: list[int], committed: int
) -> None:
    h = One(64)
    end = 0
    for i, step in enumerate(steps):
        end += step
        h.record(end, i * 1000)
    now = len(steps) * 1000
    here = h.lag_seconds(committed, now)
    further = h.lag_seconds(committed + 1, now)
    if here is not None:
        assert here >= 0
        if further is not None:
            assert further <= here


@given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(-5000, 40_000))
def test_end_at_stays_between_the_surrounding_polls(steps: list[int], at_ms: int) -> None:
    h = One(64)
    ends = []
    end = 0
    for i, step in enumerate(steps):
        end += step
        ends.append(end)
        h.record(end, i * 1000)
    estimate = h.end_at(at_ms)
    assert estimate is not None
    assert ends[0] <= estimate <= ends[-1]
    if 0 <= at_ms < (len(steps) - 1) * 1000:
        before = ends[at_ms // 1000]
        after = ends[at_ms // 1000 + 1]
        assert before <= estimate <= after
    later = h.end_at(at_ms + 500)
    assert later is not None
    assert later >= estimate


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=30), st.integers(0, 2**40))
def test_points_are_exact_in_narrow_and_wide_steps(steps: list[int], first: int) -> None:
    h = One(8)
    end = first
    ends = []
    for i, step in enumerate(steps):
        end += step
        ends.append(end)
        h.record(end, i * 1000)
    kept = ends[-8:]
    assert len(h) == len(kept)
    for i, expected in enumerate(kept, start=len(ends) - len(kept)):
        assert h.end_at(i * 1000) == expected
