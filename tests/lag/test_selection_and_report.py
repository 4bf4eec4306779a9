"""Group selection by allow/deny patterns, LagSettings validation, and the table/JSON renderings."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from pipeline.config import LagSettings, LagThreshold
from pipeline.lag.report import render_table, to_report
from pipeline.lag.selection import GroupSelector
from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import Status
from pipeline.lag.thresholds import LagThresholds


def test_default_settings_select_every_group() -> None:
    settings = LagSettings()
    select = GroupSelector(settings.allow, settings.deny)
    assert select("anything")
    assert settings.poll_interval_s == 30.0
    assert settings.window == 10


def test_deny_wins_over_allow() -> None:
    select = GroupSelector(["^reverser-"], ["-test$"])
    assert select("reverser-resolver")
    assert not select("reverser-test")
    assert not select("other")


def test_bad_patterns_are_rejected_with_the_pattern_named() -> None:
    with pytest.raises(ValidationError, match=r"invalid regular expression '\('"):
        LagSettings(allow=["("])
    with pytest.raises(re.error, match=r"invalid group pattern '\['"):
        GroupSelector(["["])


def partition(topic: str, number: int, lag: int, seconds: float | None, status: Status) -> PartitionLag:
    return PartitionLag(topic, number, 100, 0, 100 + lag, lag, 0, seconds, status)


SNAPSHOT = LagSnapshot(
    taken_ms=1_700_000_000_000,
    groups=(
        GroupLag(
            "resolver",
            Status.ERR,
            (
                partition("reverser.watch-events", 0, 0, 0.0, Status.OK),
                partition("reverser.watch-events", 1, 12, None, Status.STALL),
            ),
        ),
    ),
)


def test_table_puts_group_status_first_and_marks_unknown_seconds() -> None:
    lines = render_table(SNAPSHOT).splitlines()
    assert lines[0].split() == [
        *["GROUP", "STATUS", "PARTITIONS", "TOTAL", "LAG", "LOST", "MAX", "LAG", "S", "LIMIT", "S"]
    ]
    assert lines[1].split() == ["resolver", "ERR", "2", "12", "0", "0.0", "-"]
    rows = [line.split() for line in lines[4:]]
    assert rows == [
        ["resolver", "reverser.watch-events", "0", "100", "100", "0", "0.0", "0", "OK"],
        ["resolver", "reverser.watch-events", "1", "100", "112", "12", "-", "0", "STALL"],
    ]


def test_stale_table_says_so_and_empty_selection_is_explicit() -> None:
    stale = LagSnapshot(SNAPSHOT.taken_ms, SNAPSHOT.groups, stale=True, error="LogUnavailableError: down")
    assert render_table(stale).startswith("STALE: the latest poll failed (LogUnavailableError: down)")
    assert render_table(LagSnapshot(0, ())) == "no consumer groups selected\n"


def test_json_report_round_trips_through_pydantic() -> None:
    document = json.loads(to_report(SNAPSHOT).model_dump_json())
    assert document["stale"] is False
    (group,) = document["groups"]
    assert group["status"] == "ERR"
    assert group["total_lag"] == 12
    assert [p["lag_seconds"] for p in group["partitions"]] == [0.0, None]
    assert document["taken_at"].startswith("2023-11-14T22:13:20")


def test_a_group_over_its_lag_seconds_limit_is_marked_in_table_and_json() -> None:
    slow = GroupLag(
        "nightly",
        Status.OK,
        (partition("t", 0, 5, 10.0, Status.OK), partition("t", 1, 0, 0.0, Status.OK)),
        threshold_s=5.0,
    )
    within = GroupLag("fast", Status.OK, (partition("t", 0, 1, 2.0, Status.OK),), threshold_s=5.0)
    unknown = GroupLag("new", Status.OK, (partition("t", 0, 1, None, Status.OK),), threshold_s=5.0)
    snapshot = LagSnapshot(0, (slow, within, unknown))
    assert (slow.over_threshold, within.over_threshold, unknown.over_threshold) == (True, False, False)
    assert snapshot.any_over_threshold
    lines = render_table(snapshot).splitlines()
    assert lines[1].split() == ["nightly", "OK", "2", "5", "0", "10.0", "OVER", "5.0"]
    assert lines[2].split() == ["fast", "OK", "1", "1", "0", "2.0", "5.0"]
    document = json.loads(to_report(snapshot).model_dump_json())
    assert [(g["lag_seconds_threshold"], g["over_threshold"]) for g in document["groups"]] == [
        (5.0, True),
        (5.0, False),
        (5.0, False),
    ]


def test_the_first_matching_threshold_gives_the_limit() -> None:
    thresholds = LagThresholds(
        [LagThreshold(group="^batch-", max_lag_s=3600), LagThreshold(group=".*", max_lag_s=60)]
    )
    assert thresholds.limit_for("batch-nightly") == 3600
    assert thresholds.limit_for("web") == 60
    assert LagThresholds([]).limit_for("web") is None


def test_a_bad_threshold_pattern_or_limit_is_rejected_naming_it() -> None:
    with pytest.raises(ValidationError, match=r"invalid regular expression '\('"):
        LagSettings.model_validate({"thresholds": [{"group": "(", "max_lag_s": 5}]})
    with pytest.raises(ValidationError, match="max_lag_s"):
        LagSettings.model_validate({"thresholds": [{"group": "x", "max_lag_s": 0}]})


def test_a_partition_never_committed_shows_no_committed_offset() -> None:
    never = PartitionLag("t", 3, None, 2, 9, 7, 0, None, Status.OK)
    lines = render_table(LagSnapshot(0, (GroupLag("g", Status.OK, (never,)),))).splitlines()
    assert lines[-1].split() == ["g", "t", "3", "-", "9", "7", "-", "0", "OK"]
    document = json.loads(to_report(LagSnapshot(0, (GroupLag("g", Status.OK, (never,)),))).model_dump_json())
    assert document["groups"][0]["partitions"][0]["committed"] is None
