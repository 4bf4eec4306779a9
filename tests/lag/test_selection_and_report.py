"""Group selection by allow/deny patterns, LagSettings validation, and the table/JSON renderings."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from pipeline.config import LagSettings
from pipeline.lag.report import render_table, to_report
from pipeline.lag.selection import GroupSelector
from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import Status


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
    assert lines[0].split() == ["GROUP", "STATUS", "PARTITIONS", "TOTAL", "LAG", "LOST", "MAX", "LAG", "S"]
    assert lines[1].split() == ["resolver", "ERR", "2", "12", "0", "0.0"]
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
