"""Shared pieces of the lag tests: a movable clock, a monitor on one group, and record appends."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from pipeline.config import LagSettings, Settings
from pipeline.lag.monitor import LagMonitor, wall_clock_ms
from pipeline.lag.offsets_topic import commit_feed_for
from pipeline.lag.selection import GroupSelector
from pipeline.log.api import Log, PendingRecord, TopicPartition, TopicSpec

# Short enough that the tests need only brief sleeps between commits; the commit window keeps one
# slot per poll interval, so commits are spaced a little more than this apart.
POLL_INTERVAL_S = 0.5
COMMIT_SPACING_S = 0.55
# For tests where a single lagging commit must not read as STOP: longer than a commit through a
# fresh Kafka client takes on a loaded machine (a commit older than one interval with lag is STOP).
SLOW_POLL_INTERVAL_S = 2.0
SLOW_COMMIT_SPACING_S = 2.05


class SkewedClock:
    """Wall-clock time plus a skew the test moves forward (an injected clock, not a mock).

    Kafka stamps commits with the broker's wall clock, so the monitor's clock must start there;
    moving the skew ahead makes "no commit for an hour" true without waiting an hour.
    """

    def __init__(self) -> None:
        self.skew_ms = 0

    def __call__(self) -> int:
        return wall_clock_ms() + self.skew_ms

    def advance(self, seconds: float) -> None:
        self.skew_ms += int(seconds * 1000)


def lag_settings(**overrides: object) -> LagSettings:
    values: dict[str, object] = {"poll_interval_s": POLL_INTERVAL_S, "window": 10}
    values.update(overrides)
    return LagSettings.model_validate(values)


def monitor_for(log: Log, groups: list[str], clock: SkewedClock, **overrides: object) -> LagMonitor:
    """A monitor that sees only `groups` (the shared broker has everyone else's groups too)."""
    selector = GroupSelector([f"^{re.escape(group)}$" for group in groups])
    settings = lag_settings(**overrides)
    return LagMonitor(
        log, settings, selector=selector, clock=clock, commit_feed=commit_feed_for(log, settings)
    )


async def make_topic(log: Log, settings: Settings, suffix: str, partitions: int = 1) -> TopicPartition:
    name = f"{settings.log.topic_prefix}.{suffix}"
    await log.create_topics([TopicSpec(name, partitions)])
    return TopicPartition(name, 0)


async def produce(log: Log, tp: TopicPartition, count: int) -> None:
    await log.append_many(
        tp.topic, [PendingRecord(value=b"x" * 64, partition=tp.partition) for _ in range(count)]
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`reverser lag ARGS` as a real process, to completion."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "lag", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )
