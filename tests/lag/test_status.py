"""Burrow's rules, their order, the group roll-up and the commit window, as pure functions."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from pipeline.lag.status import (
    GROUP_STATUSES,
    LAG_CAP,
    PARTITION_STATUSES,
    CommitWindow,
    Status,
    group_status,
    partition_status,
)

S = 1000  # one "poll interval" of these tests, in ms


def window(*points: tuple[int, int, int]) -> tuple[list[int], list[int], list[int]]:
    """(offset, lag, time) points into the three sequences `partition_status` takes."""
    return [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]


def test_empty_window_is_ok() -> None:
    assert partition_status([], [], [], current_lag=50, now_ms=10 * S) is Status.OK


def test_caught_up_idle_partition_is_ok_however_old_the_last_commit() -> None:
    offsets, lags, times = window((10, 0, 0), (10, 0, S))
    assert partition_status(offsets, lags, times, current_lag=0, now_ms=3600 * S) is Status.OK


def test_no_commit_for_longer_than_the_window_spans_is_stop() -> None:
    offsets, lags, times = window((10, 5, 0), (12, 6, 2 * S))
    assert partition_status(offsets, lags, times, current_lag=6, now_ms=4 * S) is Status.WARN
    assert partition_status(offsets, lags, times, current_lag=6, now_ms=5 * S) is Status.STOP


def test_stop_needs_the_silence_to_exceed_the_minimum_span_too() -> None:
    offsets, lags, times = window(
        (10, 5, 0),
    )
    assert partition_status(offsets, lags, times, 5, now_ms=S, min_span_ms=S) is Status.OK
    assert partition_status(offsets, lags, times, 5, now_ms=S + 1, min_span_ms=S) is Status.STOP


def test_without_a_minimum_span_any_silence_past_the_window_span_is_stop() -> None:
    offsets, lags, times = window((10, 5, 7 * S))
    assert partition_status(offsets, lags, times, 5, now_ms=7 * S) is Status.OK
    assert partition_status(offsets, lags, times, 5, now_ms=7 * S + 1) is Status.STOP
    commits = CommitWindow(3)
    commits.add(10, 5, 7 * S, min_distance_ms=0)
    assert commits.status(5, now_ms=7 * S) is Status.OK
    assert commits.status(5, now_ms=7 * S + 1) is Status.STOP


def test_stop_is_checked_before_rewind() -> None:
    offsets, lags, times = window((10, 5, 0), (4, 11, S))
    assert partition_status(offsets, lags, times, current_lag=11, now_ms=S) is Status.REWIND
    assert partition_status(offsets, lags, times, current_lag=11, now_ms=3 * S) is Status.STOP


def test_rewind_clears_once_back_at_the_offset_before_the_rewind() -> None:
    # the case: 780 -> 483 (a rebalance replayed records) -> 900 ten seconds later
    before = [(700, 50, 0), (780, 40, S), (483, 330, 2 * S)]
    assert partition_status(*window(*before), current_lag=330, now_ms=2 * S) is Status.REWIND
    for newest, expected_rewind in ((779, True), (780, False), (900, False)):
        offsets, lags, times = window(*before, (newest, 60, 3 * S))
        status = partition_status(offsets, lags, times, current_lag=60, now_ms=3 * S)
        assert (status is Status.REWIND) is expected_rewind, newest
    offsets, lags, times = window(*before, (900, 20, 3 * S))
    assert partition_status(offsets, lags, times, current_lag=20, now_ms=3 * S) is Status.OK


def test_a_second_rewind_before_recovering_waits_for_the_highest_offset() -> None:
    offsets, lags, times = window((100, 9, 0), (200, 9, S), (150, 9, 2 * S), (180, 9, 3 * S), (170, 9, 4 * S))
    assert partition_status(offsets, lags, times, 9, 4 * S) is Status.REWIND
    offsets[-1] = 199
    assert partition_status(offsets, lags, times, 9, 4 * S) is Status.REWIND
    offsets[-1] = 200
    assert partition_status(offsets, lags, times, 9, 4 * S) is not Status.REWIND


def test_stop_is_timed_from_the_first_commit_of_the_newest_entry() -> None:
    # entries opened at 0 and 2 s; the newest entry merged commits up to 2.9 s
    offsets, lags, times = window((10, 5, 0), (12, 6, 2 * S))
    at_first = partition_status(offsets, lags, times, 6, now_ms=4 * S + 1, min_span_ms=S, last_seen_ms=2900)
    assert at_first is Status.STOP


def test_no_stop_while_a_commit_was_seen_within_the_poll_interval() -> None:
    offsets, lags, times = window(
        (10, 5, 0),
    )
    assert partition_status(offsets, lags, times, 5, now_ms=S + 1, min_span_ms=S, last_seen_ms=S // 2) is (
        Status.OK
    )
    assert partition_status(offsets, lags, times, 5, now_ms=2 * S, min_span_ms=S, last_seen_ms=S // 2) is (
        Status.STOP
    )


def test_offset_going_backwards_is_rewind_even_if_lag_touched_zero() -> None:
    offsets, lags, times = window((10, 0, 0), (12, 0, S), (3, 9, 2 * S))
    assert partition_status(offsets, lags, times, current_lag=9, now_ms=2 * S) is Status.REWIND


def test_lag_zero_somewhere_in_the_window_is_ok() -> None:
    offsets, lags, times = window((10, 0, 0), (10, 4, S), (10, 8, 2 * S))
    assert partition_status(offsets, lags, times, current_lag=8, now_ms=2 * S) is Status.OK


def test_same_offset_committed_while_lagging_is_stall() -> None:
    offsets, lags, times = window((10, 2, 0), (10, 4, S), (10, 8, 2 * S))
    assert partition_status(offsets, lags, times, current_lag=8, now_ms=2 * S) is Status.STALL


def test_advancing_offsets_with_lag_never_shrinking_is_warn() -> None:
    offsets, lags, times = window((10, 2, 0), (12, 4, S), (14, 4, 2 * S), (16, 7, 3 * S))
    assert partition_status(offsets, lags, times, current_lag=7, now_ms=3 * S) is Status.WARN


def test_advancing_offsets_with_lag_shrinking_somewhere_is_ok() -> None:
    offsets, lags, times = window((10, 2, 0), (12, 4, S), (14, 3, 2 * S), (16, 7, 3 * S))
    assert partition_status(offsets, lags, times, current_lag=7, now_ms=3 * S) is Status.OK


def test_a_single_recent_commit_carries_no_evidence() -> None:
    assert partition_status([10], [4], [S], current_lag=4, now_ms=S) is Status.OK


def test_group_status_is_the_worst_partition_with_errors_as_err() -> None:
    assert group_status([]) is Status.OK
    assert group_status([Status.OK, Status.WARN, Status.OK]) is Status.WARN
    for error in (Status.STOP, Status.STALL, Status.REWIND):
        assert group_status([Status.OK, error, Status.WARN]) is Status.ERR


def test_window_keeps_the_last_n_commits() -> None:
    w = CommitWindow(3)
    for i in range(5):
        w.add(offset=10 + i, lag=1, commit_ms=i * S, min_distance_ms=S)
    assert w.offsets() == [12, 13, 14]
    assert w.last_commit_ms == 4 * S


def test_commits_closer_than_min_distance_share_a_slot() -> None:
    w = CommitWindow(10)
    w.add(offset=10, lag=3, commit_ms=0, min_distance_ms=S)
    w.add(offset=11, lag=2, commit_ms=S // 2, min_distance_ms=S)
    w.add(offset=12, lag=1, commit_ms=S - 1, min_distance_ms=S)
    assert w.entries() == [(12, 1, 0)]  # the newest offset and lag, the first commit time
    assert w.last_commit_ms == S - 1
    w.add(offset=13, lag=1, commit_ms=S, min_distance_ms=S)
    assert w.offsets() == [12, 13]


points = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 10_000)),
    min_size=1,
    max_size=12,
).map(lambda ps: sorted(ps, key=lambda p: p[2]))


@given(points, st.integers(0, 20_000))
def test_no_lag_now_is_always_ok(ps: list[tuple[int, int, int]], extra_ms: int) -> None:
    offsets, lags, times = window(*ps)
    assert partition_status(offsets, lags, times, 0, times[-1] + extra_ms) is Status.OK


@given(points, st.integers(1, 1000), st.integers(0, 20_000), st.integers(0, 5000))
def test_rules_apply_in_burrows_order(
    ps: list[tuple[int, int, int]], current_lag: int, extra_ms: int, min_span_ms: int
) -> None:
    offsets, lags, times = window(*ps)
    now_ms = times[-1] + extra_ms
    status = partition_status(offsets, lags, times, current_lag, now_ms, min_span_ms)
    stopped = now_ms - times[-1] > max(times[-1] - times[0], min_span_ms)
    rewound = any(
        offsets[i] < offsets[i - 1] and all(later < offsets[i - 1] for later in offsets[i:])
        for i in range(1, len(offsets))
    )
    touched_zero = 0 in lags
    if stopped:
        assert status is Status.STOP
    elif rewound:
        assert status is Status.REWIND
    elif touched_zero or len(ps) < 2:
        assert status is Status.OK
    elif len(set(offsets)) == 1:
        assert status is Status.STALL
    elif all(b >= a for a, b in itertools.pairwise(lags)):
        assert status is Status.WARN
    else:
        assert status is Status.OK


@given(points, st.integers(1, 1000))
def test_a_commit_seen_now_is_never_stop(ps: list[tuple[int, int, int]], current_lag: int) -> None:
    offsets, lags, times = window(*ps)
    assert partition_status(offsets, lags, times, current_lag, times[-1]) is not Status.STOP


@given(st.lists(st.sampled_from(list(Status)), max_size=20))
def test_group_is_err_exactly_when_a_partition_has_an_error(statuses: list[Status]) -> None:
    result = group_status(statuses)
    assert result in (Status.OK, Status.WARN, Status.ERR)
    assert (result is Status.ERR) == any(s.is_error for s in statuses)
    assert (result is Status.WARN) == (Status.WARN in statuses and not any(s.is_error for s in statuses))


@given(
    st.integers(1, 10),
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 5 * S)), max_size=40),
)
def test_window_is_bounded_and_time_ordered(size: int, commits: list[tuple[int, int]]) -> None:
    w = CommitWindow(size)
    now = 0
    for offset, step in commits:
        now += step
        w.add(offset, 0, now, S)
    assert len(w) <= size
    if commits:
        assert w.last_offset == commits[-1][0]
        assert w.last_commit_ms == now


class WindowModel:
    """The window rules as the docs state them, in the plainest code: a list of [offset, lag, first time]."""

    def __init__(self, size: int, min_distance_ms: int) -> None:
        self.size = size
        self.min_distance_ms = min_distance_ms
        self.entries: list[list[int]] = []
        self.last_seen_ms = 0

    def add(self, offset: int, lag: int, commit_ms: int) -> None:
        if self.entries and commit_ms < self.entries[-1][2]:
            return
        self.last_seen_ms = max(self.last_seen_ms, commit_ms)
        if self.entries and commit_ms - self.entries[-1][2] < self.min_distance_ms:
            self.entries[-1][0] = offset
            self.entries[-1][1] = lag
            return
        self.entries.append([offset, lag, commit_ms])
        self.entries = self.entries[-self.size :]

    def status(self, current_lag: int, now_ms: int) -> Status:
        if not self.entries or current_lag <= 0:
            return Status.OK
        offsets = [e[0] for e in self.entries]
        lags = [e[1] for e in self.entries]
        newest_first_ms = self.entries[-1][2]
        span_ms = newest_first_ms - self.entries[0][2]
        silent_ms = now_ms - newest_first_ms
        if (
            silent_ms > span_ms
            and silent_ms > self.min_distance_ms
            and (now_ms - self.last_seen_ms > self.min_distance_ms)
        ):
            return Status.STOP
        highest_before = max(offsets[:-1], default=offsets[-1])
        if offsets[-1] < highest_before:
            return Status.REWIND
        if 0 in lags or len(offsets) == 1:
            return Status.OK
        if len(set(offsets)) == 1:
            return Status.STALL
        if all(b >= a for a, b in itertools.pairwise(lags)):
            return Status.WARN
        return Status.OK


commit_runs = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 40), st.integers(-S // 2, 3 * S)), min_size=1, max_size=40
)


@given(st.integers(1, 10), commit_runs, st.integers(0, 40), st.integers(0, 30 * S))
def test_window_and_rules_agree_with_the_model(
    size: int, commits: list[tuple[int, int, int]], current_lag: int, wait_ms: int
) -> None:
    """Random commit sequences (merges, rewinds, stalls, silences, out-of-order times) match the model."""
    w = CommitWindow(size)
    model = WindowModel(size, S)
    now = 1_700_000_000_000
    offset = 1000
    for step, lag, gap_ms in commits:
        now += gap_ms
        offset += step - 20  # steps back now and then: rewinds and recoveries
        w.add(offset, lag, now, S)
        model.add(offset, lag, now)
        assert [list(e) for e in w.entries()] == model.entries
        assert w.status(current_lag, now, S) is model.status(current_lag, now)
    assert w.status(current_lag, now + wait_ms, S) is model.status(current_lag, now + wait_ms)


def test_window_times_far_apart_are_rebased_not_wrapped() -> None:
    w = CommitWindow(3)
    w.add(1, 5, 0, S)
    w.add(2, 5, 40 * 86_400_000, S)
    w.add(3, 5, 80 * 86_400_000, S)  # beyond the 32-bit span from the first: that one is dropped
    assert w.entries() == [(2, 5, 40 * 86_400_000), (3, 5, 80 * 86_400_000)]
    w.add(4, 2**40, 80 * 86_400_000 + S, S)
    assert w.entries()[-1] == (4, LAG_CAP, 80 * 86_400_000 + S)


def test_lags_keep_31_bits_and_larger_ones_compare_as_the_cap() -> None:
    w = CommitWindow(4)
    w.add(1, 2**31 - 1, S, 0)
    w.add(2, 2**31, 2 * S, 0)
    w.add(3, 2**30 + 5, 3 * S, 0)
    assert w.entries() == [(1, 2**31 - 1, S), (2, 2**31 - 1, 2 * S), (3, 2**30 + 5, 3 * S)]
    assert LAG_CAP == 2**31 - 1


def test_a_full_window_keeps_its_size_and_the_newest_entries_however_many_commits_come() -> None:
    w = CommitWindow(3)
    for n in range(10):
        w.add(100 + n, 50 - n, n * S, S)
        assert w.capacity == 3
    assert w.entries() == [(107, 43, 7 * S), (108, 42, 8 * S), (109, 41, 9 * S)]
    assert (len(w), w.last_offset, w.last_commit_ms) == (3, 109, 9 * S)


def test_rebasing_drops_old_entries_and_keeps_each_kept_entrys_lag_and_time() -> None:
    day = 86_400_000
    w = CommitWindow(4)
    w.add(1, 5, 0, S)
    w.add(2, 6, 10 * day, S)
    w.add(3, 7, 40 * day, S)
    w.add(4, 8, 55 * day, S)  # over 2**32 ms after the first: the first is dropped, the rest rebased
    assert w.entries() == [(2, 6, 10 * day), (3, 7, 40 * day), (4, 8, 55 * day)]


def test_a_caught_up_consumer_weeks_after_the_window_base_is_ok_not_warn() -> None:
    # the window's base stays at its first commit; lags of later entries must not pick up time bits
    w = CommitWindow(2)
    w.add(5, 3, 0, S)
    w.add(10, 0, 2**31, S)
    w.add(12, 0, 2**31 + S, S)
    assert w.entries() == [(10, 0, 2**31), (12, 0, 2**31 + S)]
    assert w.status(current_lag=4, now_ms=2**31 + S) is Status.OK


def test_severity_follows_burrows_order_and_partition_statuses_exclude_err() -> None:
    order = [Status.OK, Status.WARN, Status.ERR, Status.STOP, Status.STALL, Status.REWIND]
    assert [s.severity for s in order] == sorted({s.severity for s in order})
    assert [s.is_error for s in order] == [False, False, True, True, True, True]
    assert set(PARTITION_STATUSES) == set(Status) - {Status.ERR}
    assert set(GROUP_STATUSES) == {Status.OK, Status.WARN, Status.ERR}


def test_stop_boundaries_of_the_guard_on_the_newest_commit_seen() -> None:
    offsets, lags, times = window(
        (10, 5, 0),
    )
    # a commit seen exactly now, or exactly one poll interval ago, keeps it from STOP
    assert partition_status(offsets, lags, times, 5, now_ms=5 * S, last_seen_ms=5 * S) is Status.OK
    assert partition_status(offsets, lags, times, 5, now_ms=5 * S, min_span_ms=S, last_seen_ms=4 * S) is (
        Status.OK
    )
    assert partition_status(offsets, lags, times, 5, now_ms=5 * S + 1, min_span_ms=S, last_seen_ms=4 * S) is (
        Status.STOP
    )


def test_a_late_commit_within_the_newest_entry_does_not_move_the_newest_commit_seen_back() -> None:
    w = CommitWindow(5)
    w.add(10, 5, 0, S)
    w.add(11, 5, 900, S)
    w.add(12, 5, 500, S)  # not older than the entry's first commit: merged, but seen earlier than 900
    assert w.entries() == [(12, 5, 0)]
    assert w.last_commit_ms == 900
    assert w.status(5, 1800, S) is Status.OK  # 900 ms since the newest commit seen: not STOP yet
    assert w.status(5, 1901, S) is Status.STOP


def test_a_window_lag_of_one_record_is_not_zero() -> None:
    w = CommitWindow(5)
    w.add(10, 1, 0, S)
    w.add(12, 1, S, S)
    assert w.status(1, S, S) is Status.WARN  # moving, lag never decreasing, never zero


def test_an_entry_exactly_the_32_bit_span_older_is_dropped() -> None:
    w = CommitWindow(3)
    w.add(1, 5, 0, S)
    w.add(2, 5, 2**32, S)
    assert w.entries() == [(2, 5, 2**32)]
