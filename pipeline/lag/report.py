"""How `reverser lag` shows a snapshot: pydantic models for JSON and a plain-text table."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel

from pipeline.lag.snapshot import GroupLag, LagSnapshot
from pipeline.lag.status import Status

__all__ = ["GroupReport", "LagReport", "PartitionReport", "render_table", "to_report"]


class PartitionReport(BaseModel):
    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int
    lag: int
    records_lost: int
    lag_seconds: float | None
    status: Status


class GroupReport(BaseModel):
    group: str
    status: Status
    total_lag: int
    records_lost: int
    max_lag_seconds: float | None
    lag_seconds_threshold: float | None
    over_threshold: bool
    partitions: list[PartitionReport]


class LagReport(BaseModel):
    """The JSON document `reverser lag --output json` prints."""

    taken_at: datetime
    stale: bool
    error: str | None
    groups: list[GroupReport]


def _group(group: GroupLag) -> GroupReport:
    return GroupReport(
        group=group.group,
        status=group.status,
        total_lag=group.total_lag,
        records_lost=group.total_lost,
        max_lag_seconds=group.max_lag_seconds,
        lag_seconds_threshold=group.threshold_s,
        over_threshold=group.over_threshold,
        partitions=[
            PartitionReport(
                topic=p.topic,
                partition=p.partition,
                committed=p.committed,
                log_start=p.start,
                log_end=p.end,
                lag=p.lag,
                records_lost=p.lost,
                lag_seconds=p.lag_seconds,
                status=p.status,
            )
            for p in group.partitions
        ],
    )


def to_report(snapshot: LagSnapshot) -> LagReport:
    return LagReport(
        taken_at=datetime.fromtimestamp(snapshot.taken_ms / 1000.0, tz=UTC),
        stale=snapshot.stale,
        error=snapshot.error,
        groups=[_group(group) for group in snapshot.groups],
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _columns(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]
    ]


def render_table(snapshot: LagSnapshot) -> str:
    """Group statuses first, then one row per partition; `-` marks lag seconds not yet known."""
    lines: list[str] = []
    if snapshot.stale:
        lines.append(f"STALE: the latest poll failed ({snapshot.error}); values are from an earlier poll")
    if not snapshot.groups:
        lines.append("no consumer groups selected")
        return "\n".join(lines) + "\n"
    lines += _columns(
        ("GROUP", "STATUS", "PARTITIONS", "TOTAL LAG", "LOST", "MAX LAG S", "LIMIT S"),
        [
            (
                g.group,
                g.status.value,
                str(len(g.partitions)),
                str(g.total_lag),
                str(g.total_lost),
                _seconds(g.max_lag_seconds) + (" OVER" if g.over_threshold else ""),
                _seconds(g.threshold_s),
            )
            for g in snapshot.groups
        ],
    )
    lines.append("")
    lines += _columns(
        ("GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "LAG S", "LOST", "STATUS"),
        [
            (
                g.group,
                p.topic,
                str(p.partition),
                "-" if p.committed is None else str(p.committed),
                str(p.end),
                str(p.lag),
                _seconds(p.lag_seconds),
                str(p.lost),
                p.status.value,
            )
            for g in snapshot.groups
            for p in g.partitions
        ],
    )
    return "\n".join(lines) + "\n"
