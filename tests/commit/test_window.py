"""The commit window as a pure value: its limits, what a write adds, and when it closes.

The branch worker tests drive windows through a real Git remote; these pin the window's own rules
(docs/commit-worker.md, "Commit windows") at their boundaries, without I/O.
"""

from __future__ import annotations

from pipeline.codec.branch_work import WorkAuthor
from pipeline.commit.messages import ChangedObject
from pipeline.commit.window import CloseReason, CommitWindow, event_time_ms, window_limits_s
from pipeline.config import ProviderSettings, TargetSettings

ALICE = WorkAuthor("RESOLVED", "alice", tier="exact", event_time_ms=50_000)
ALICE_UNTIMED = WorkAuthor("RESOLVED", "alice", tier="exact")
BOB = WorkAuthor("RESOLVED", "bob", tier="collection", event_time_ms=51_000)
NOBODY = WorkAuthor("UNRESOLVED", tier="absent")
CM = ChangedObject("UPDATE", "", "v1", "configmaps", "team-a", "app")


def provider(silence_s: float = 5.0, max_s: float | None = None) -> ProviderSettings:
    return ProviderSettings(name="git", url="/srv/g", commit_window_s=silence_s, commit_window_max_s=max_s)


def target(silence_s: float | None) -> TargetSettings:
    return TargetSettings(name="t", provider="git", commit_window_s=silence_s)


def new_window(silence_s: float = 10.0, max_age_s: float = 60.0, opened_at: float = 100.0) -> CommitWindow:
    key = CommitWindow.key_of(ALICE, "t")
    return CommitWindow(key, ALICE, "t", 0.0, silence_s, max_age_s, opened_at=opened_at)


def test_key_is_outcome_username_and_target() -> None:
    assert CommitWindow.key_of(ALICE, "prod") == ("RESOLVED", "alice", "prod")
    assert CommitWindow.key_of(NOBODY, "prod") == ("UNRESOLVED", "", "prod")


def test_event_time_is_the_facts_time_else_when_observed() -> None:
    assert event_time_ms(ALICE, 90_000) == 50_000
    assert event_time_ms(ALICE_UNTIMED, 90_000) == 90_000


def test_limits_take_the_target_silence_over_the_providers_and_default_the_age_to_the_silence() -> None:
    assert window_limits_s(provider(5.0), None) == (5.0, 5.0)
    assert window_limits_s(provider(5.0), target(None)) == (5.0, 5.0)
    assert window_limits_s(provider(5.0), target(2.0)) == (2.0, 2.0)
    assert window_limits_s(provider(5.0), target(0.0)) == (0.0, 0.0)
    assert window_limits_s(provider(5.0, max_s=30.0), target(2.0)) == (2.0, 30.0)
    assert window_limits_s(provider(5.0, max_s=30.0), None) == (5.0, 30.0)


def test_close_reasons_are_the_metric_labels() -> None:
    labels = {
        CloseReason.SILENCE: "silence",
        CloseReason.MAX_AGE: "max_age",
        CloseReason.AUTHOR_CHANGE: "author_or_target_change",
        CloseReason.SIZE_CAP: "size_cap",
        CloseReason.WINDOW_ZERO: "window_zero",
        CloseReason.SNAPSHOT: "snapshot_end",
        CloseReason.SHUTDOWN: "shutdown",
        CloseReason.REVOKED: "revoked",
        CloseReason.TARGET_DELETED: "target_deleted",
        CloseReason.COMMIT_REQUEST: "commit_request",
        CloseReason.LATE_AUTHOR: "late_author",
    }
    assert set(labels) == set(CloseReason), "every close reason has its label here"
    assert all(reason == label for reason, label in labels.items())


def test_a_fresh_window_is_empty() -> None:
    window = new_window()
    assert (window.size, window.writes, window.tiers, window.offsets) == (0, {}, [], [])
    assert (window.first_observed_ms, window.last_observed_ms) == (0, 0)
    assert (window.first_event_ms, window.last_event_ms) == (0, 0)
    assert (window.touched_at, new_window(opened_at=0.0).opened_at) == (0.0, 0.0)
    assert window.apart_from(10**9) is False
    assert window.apart_from(0) is False
    assert window.aged_before(10**9) is False


def test_a_repeated_path_keeps_its_place_takes_the_newest_content_and_counts_its_size_once() -> None:
    window = new_window()
    window.add("a.yaml", b"12345", CM, ALICE, (0, 7), 90_000)
    window.add("b.yaml", b"xy", CM, BOB, (1, 8), 91_000)
    window.add("a.yaml", b"123", CM, ALICE, (0, 9), 92_000)
    assert list(window.writes) == ["a.yaml", "b.yaml"]
    assert window.writes["a.yaml"][0] == b"123"
    assert window.size == 5
    window.add("a.yaml", None, CM, ALICE, (0, 10), 93_000)  # deleted: no content
    assert window.size == 2
    window.add("a.yaml", b"1", CM, ALICE, (0, 11), 94_000)
    assert window.size == 3
    assert window.offsets == [(0, 7), (1, 8), (0, 9), (0, 10), (0, 11)]
    assert window.tiers == ["exact alice", "collection bob"]


def test_the_tier_label_of_an_unnamed_author_is_the_tier_alone() -> None:
    window = new_window()
    window.add("a.yaml", b"x", CM, NOBODY, (0, 1), 90_000)
    window.add("b.yaml", b"x", CM, NOBODY, (0, 2), 90_000)
    assert window.tiers == ["absent"]


def test_observed_and_event_times_keep_the_first_and_the_newest() -> None:
    window = new_window()
    window.add("a.yaml", b"x", CM, BOB, (0, 1), 90_000)
    window.add("b.yaml", b"x", CM, ALICE, (0, 2), 80_000)  # observed earlier, made earlier
    window.add("c.yaml", b"x", CM, ALICE_UNTIMED, (0, 3), 95_000)  # no fact: observed time
    assert (window.first_observed_ms, window.last_observed_ms) == (90_000, 95_000)
    assert (window.first_event_ms, window.last_event_ms) == (51_000, 95_000)


def test_apart_from_at_exactly_the_silence_after_the_last_or_before_the_first_write() -> None:
    window = new_window(silence_s=10.0)
    window.add("a.yaml", b"x", CM, ALICE, (0, 1), 90_000)  # made at 50 s
    window.add("b.yaml", b"x", CM, BOB, (0, 2), 90_000)  # made at 51 s
    assert not window.apart_from(60_999)
    assert window.apart_from(61_000)
    assert not window.apart_from(40_001)
    assert window.apart_from(40_000)
    assert not window.apart_from(50_500)


def test_aged_before_at_exactly_the_maximum_age_after_the_first_write() -> None:
    window = new_window(max_age_s=60.0)
    window.add("a.yaml", b"x", CM, ALICE, (0, 1), 90_000)  # made at 50 s
    assert not window.aged_before(109_999)
    assert window.aged_before(110_000)
    assert not window.aged_before(50_000)


def test_touch_moves_the_deadline_by_the_silence_but_never_past_the_maximum_age() -> None:
    window = new_window(silence_s=10.0, max_age_s=60.0, opened_at=100.0)
    window.touch(120.0)
    assert (window.touched_at, window.deadline) == (120.0, 130.0)
    window.touch(155.0)
    assert (window.touched_at, window.deadline) == (155.0, 160.0)


def test_clock_close_reason_is_silence_once_it_ran_out_else_age() -> None:
    window = new_window(silence_s=10.0, max_age_s=60.0, opened_at=100.0)
    window.touch(155.0)
    assert window.clock_close_reason(165.0) == CloseReason.SILENCE
    assert window.clock_close_reason(164.5) == CloseReason.MAX_AGE
    assert window.clock_close_reason(160.0) == CloseReason.MAX_AGE
