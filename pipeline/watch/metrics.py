"""Prometheus metrics of watch ingestion (`reverser_watch_*`).

Counters are module-level; the per-stream gauges (state, cursor age, rule problems) are computed
at scrape time from the live stream managers, so a stopped stream never leaves a stale series.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Protocol

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "CLAIMS",
    "CONCURRENT_WATCHERS_DETECTED",
    "CURSOR_DECODE_ERRORS",
    "DROPPED",
    "EVENTS",
    "FENCED",
    "GONE",
    "RECONNECTS",
    "RECORDS",
    "SNAPSHOTS",
    "StreamView",
    "WatchSource",
    "event_counter",
    "register_source",
]

FENCED = Counter(
    "reverser_watch_fenced_total",
    "Times this replica's writes for a cluster were refused because a newer leader had started "
    "(it stopped watching the cluster), by cluster",
    ["cluster"],
)
EVENTS = Counter(
    "reverser_watch_events_total", "Watch events received from the API servers, by type", ["type"]
)


@functools.cache
def event_counter(event_type: str) -> Counter:
    """`EVENTS` of one type, looked up once: `labels()` costs microseconds on every event."""
    return EVENTS.labels(event_type)


DROPPED = Counter(
    "reverser_watch_events_dropped_total",
    "Watch events not written to the log, by reason",
    ["reason"],
)
SNAPSHOTS = Counter(
    "reverser_watch_snapshots_total",
    "Snapshots by how they were taken (watchlist|list) and outcome (completed|abandoned)",
    ["mode", "outcome"],
)
STREAM_STARTS = Counter(
    "reverser_watch_stream_starts_total",
    "Watch streams this process started (configuration change, leadership, start), by target",
    ["target"],
)
STREAM_STOPS = Counter(
    "reverser_watch_stream_stops_total",
    "Watch streams this process stopped, by target and reason "
    "(removed|replaced|cluster_changed|leadership_lost|shutdown)",
    ["target", "reason"],
)
RECONNECTS = Counter("reverser_watch_reconnects_total", "Watch sessions started after an earlier one ended")
GONE = Counter("reverser_watch_gone_total", "410 Gone / Expired answers that forced a fresh snapshot")
RECORDS = Counter("reverser_watch_records_total", "Records acknowledged by the log on watch-events")
CURSOR_DECODE_ERRORS = Counter(
    "reverser_watch_cursor_decode_errors_total", "Undecodable records skipped on watch-cursors"
)
CLAIMS = Counter(
    "reverser_watch_claims_total",
    "Watcher heartbeats on watch-claims, by direction (written by this process, read from the log)",
    ["direction"],
)
CONCURRENT_WATCHERS_DETECTED = Counter(
    "reverser_watch_concurrent_watchers_detected_total",
    "Other processes found watching a cluster at the same time as this one (each counted once)",
    ["cluster"],
)


class StreamState(StrEnum):
    """Where a watch stream is (the `state` label of `reverser_watch_streams`)."""

    REPLAYING = "Replaying"
    STREAMING = "Streaming"
    BACKOFF = "Backoff"
    STOPPED = "Stopped"


class DropReason(StrEnum):
    """Why a watch event was not written (the `reason` label of `reverser_watch_events_dropped_total`)."""

    UNKNOWN_TYPE = "unknown_type"
    COVERED_BY_LIST = "covered_by_list"
    UNCHANGED = "unchanged"
    TOO_LARGE = "too_large"
    TERMINATING_IN_SNAPSHOT = "terminating_in_snapshot"
    UNDECODABLE = "undecodable"


class StreamView(Protocol):
    """What the collector reads from a stream."""

    @property
    def state(self) -> str: ...

    @property
    def labels(self) -> tuple[str, str, str]: ...

    @property
    def cursor_updated_at_ms(self) -> int | None: ...


class WatchSource(Protocol):
    """Something that owns streams and rule problems (the stream manager)."""

    def stream_views(self) -> Iterable[StreamView]: ...

    def problem_reasons(self) -> Iterable[tuple[str, str]]: ...

    def shards_led(self) -> Iterable[tuple[str, int, int]]: ...

    def concurrent_watchers(self) -> Iterable[tuple[str, int]]: ...


_sources: weakref.WeakSet[WatchSource] = weakref.WeakSet()


def register_source(source: WatchSource) -> None:
    _sources.add(source)


class _StreamCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        states = GaugeMetricFamily("reverser_watch_streams", "Watch streams by state", labels=["state"])
        ages = GaugeMetricFamily(
            "reverser_watch_cursor_age_seconds",
            "Seconds since a stream's cursor last advanced",
            labels=["target", "resource", "scope"],
        )
        problems = GaugeMetricFamily(
            "reverser_watch_rule_problems",
            "Rule entries that resolve to no stream, by target and reason",
            labels=["target", "reason"],
        )
        leaders = GaugeMetricFamily(
            "reverser_watch_leader",
            "1 when this replica holds the cluster's lease (or runs without leader election)",
            labels=["cluster"],
        )
        shards_led = GaugeMetricFamily(
            "reverser_watch_shards_led",
            "Watch shards of the cluster this replica leads (watch_shards; 1 and 1 when unsharded)",
            labels=["cluster"],
        )
        shards_total = GaugeMetricFamily(
            "reverser_watch_shards",
            "Watch shards the cluster is split into (watch_shards)",
            labels=["cluster"],
        )
        concurrent = GaugeMetricFamily(
            "reverser_watch_concurrent_watchers",
            "Other processes watching a cluster this replica watches, right now (0 when alone)",
            labels=["cluster"],
        )
        rivals: Tally[str] = Tally()
        counted: Tally[str] = Tally()
        led: Tally[str] = Tally()
        configured: dict[str, int] = {}
        problem_count: Tally[tuple[str, str]] = Tally()
        now_ms = time.time() * 1000
        for source in list(_sources):
            for view in source.stream_views():
                counted[view.state] += 1
                updated = view.cursor_updated_at_ms
                if updated is not None and view.state != StreamState.STOPPED:
                    ages.add_metric(list(view.labels), max(0.0, (now_ms - updated) / 1000))
            problem_count.update(source.problem_reasons())
            for cluster, count in source.concurrent_watchers():
                rivals[cluster] += count
            for cluster, count, total in source.shards_led():
                led[cluster] += count
                configured[cluster] = total
        for state in StreamState:
            states.add_metric([state], counted.get(state, 0))
        for (target, reason), count in sorted(problem_count.items()):
            problems.add_metric([target, reason], count)
        yield states
        yield ages
        for cluster in sorted(configured):
            leaders.add_metric([cluster], 1.0 if led.get(cluster, 0) else 0.0)
        for cluster, count in sorted(rivals.items()):
            concurrent.add_metric([cluster], float(count))
        for cluster, total in sorted(configured.items()):
            shards_led.add_metric([cluster], float(led.get(cluster, 0)))
            shards_total.add_metric([cluster], float(total))
        yield problems
        yield leaders
        yield shards_led
        yield shards_total
        yield concurrent


REGISTRY.register(_StreamCollector())
