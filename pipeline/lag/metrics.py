"""Prometheus export of lag snapshots, with label sets of vanished groups and partitions removed.

Gauges are set from each snapshot and every label set the previous export wrote but this one did
not is removed, so cardinality follows the selected groups rather than growing forever. When a
poll fails the last values stay exported and `reverser_lag_stale` says they are old.
"""

from __future__ import annotations

import collections

from prometheus_client import Counter, Gauge

from pipeline.lag.snapshot import LagSnapshot
from pipeline.lag.status import GROUP_STATUSES, PARTITION_STATUSES

__all__ = ["POLL_ERRORS", "LagMetrics"]

_PARTITION_LABELS = ("group", "topic", "partition")

LAG = Gauge(
    "reverser_consumergroup_lag",
    "Records the group has not consumed yet (log-end minus committed offset, never negative).",
    _PARTITION_LABELS,
)
LAG_SECONDS = Gauge(
    "reverser_consumergroup_lag_seconds",
    "How far behind the group is in time, from the log-end offset history (absent while unknown).",
    _PARTITION_LABELS,
)
LOST = Gauge(
    "reverser_consumergroup_records_lost",
    "Records deleted by retention before the group consumed them (log-start minus committed).",
    _PARTITION_LABELS,
)
STATUS = Gauge(
    "reverser_consumergroup_status",
    "1 for the group's current Burrow-style status (OK, WARN, ERR), 0 for the others.",
    ("group", "status"),
)
PARTITION_STATUS = Gauge(
    "reverser_consumergroup_partition_status",
    "1 for the partition's current status (OK, WARN, STOP, STALL, REWIND), exported only when not OK.",
    (*_PARTITION_LABELS, "status"),
)
POLL_ERRORS = Counter(
    "reverser_lag_poll_errors_total",
    "Polls of group offsets and log bounds that failed (broker unreachable, timeouts).",
)
STALE = Gauge(
    "reverser_lag_stale",
    "1 when the exported lag values come from an earlier poll because the latest one failed.",
)
LAST_SUCCESS = Gauge(
    "reverser_lag_last_success_timestamp_seconds",
    "Unix time of the last poll that read every selected group.",
)
THRESHOLD = Gauge(
    "reverser_consumergroup_lag_seconds_threshold",
    "The group's configured lag-seconds limit (only groups that have one).",
    ("group",),
)
OVER_THRESHOLD = Gauge(
    "reverser_consumergroup_over_threshold",
    "1 while the group's largest lag in seconds exceeds its configured limit, else 0.",
    ("group",),
)
GROUPS = Gauge(
    "reverser_lag_groups",
    "Cluster-wide: selected consumer groups by group status (OK, WARN, ERR).",
    ("status",),
)
PARTITIONS = Gauge(
    "reverser_lag_partitions",
    "Cluster-wide: group partitions by partition status (OK, WARN, STOP, STALL, REWIND).",
    ("status",),
)
TOTAL_LAG = Gauge(
    "reverser_lag_total_records",
    "Cluster-wide: records not yet consumed, summed over every selected group partition.",
)
MAX_LAG_SECONDS = Gauge(
    "reverser_lag_max_seconds",
    "Cluster-wide: the largest known lag in seconds of any selected group partition (0 when none).",
)
GROUPS_OVER_THRESHOLD = Gauge(
    "reverser_lag_groups_over_threshold",
    "Cluster-wide: groups whose largest lag in seconds exceeds their configured limit.",
)
KLE_GROUP_LAG = Gauge(
    "kafka_consumergroup_group_lag",
    "kafka-lag-exporter compatible: offset lag per group partition.",
    _PARTITION_LABELS,
)
KLE_GROUP_LAG_SECONDS = Gauge(
    "kafka_consumergroup_group_lag_seconds",
    "kafka-lag-exporter compatible: time lag per group partition.",
    _PARTITION_LABELS,
)

_LabelSets = dict[Gauge, set[tuple[str, ...]]]


class LagMetrics:
    """Writes snapshots into the default registry; remembers what it wrote so it can remove it."""

    def __init__(self, *, kafka_lag_exporter_names: bool = False) -> None:
        self._kle = kafka_lag_exporter_names
        self._written: _LabelSets = {}

    def export(self, snapshot: LagSnapshot) -> None:
        """Publish a snapshot; a stale one only flips the stale marker and counts the error."""
        if snapshot.stale:
            POLL_ERRORS.inc()
            STALE.set(1)
            return
        STALE.set(0)
        LAST_SUCCESS.set(snapshot.taken_ms / 1000.0)
        values: dict[Gauge, dict[tuple[str, ...], float]] = {}

        def put(gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
            values.setdefault(gauge, {})[labels] = value

        for group in snapshot.groups:
            for status in GROUP_STATUSES:
                put(STATUS, (group.group, status.value), 1.0 if group.status is status else 0.0)
            if group.threshold_s is not None:
                put(THRESHOLD, (group.group,), group.threshold_s)
                put(OVER_THRESHOLD, (group.group,), 1.0 if group.over_threshold else 0.0)
            for p in group.partitions:
                labels = (group.group, p.topic, str(p.partition))
                put(LAG, labels, p.lag)
                put(LOST, labels, p.lost)
                if p.status.value != "OK":
                    put(PARTITION_STATUS, (*labels, p.status.value), 1.0)
                if p.lag_seconds is not None:
                    put(LAG_SECONDS, labels, p.lag_seconds)
                if self._kle:
                    put(KLE_GROUP_LAG, labels, p.lag)
                    if p.lag_seconds is not None:
                        put(KLE_GROUP_LAG_SECONDS, labels, p.lag_seconds)
        _export_summary(snapshot)
        written: _LabelSets = {}
        for gauge, series in values.items():
            for label_set, value in series.items():
                gauge.labels(*label_set).set(value)
            written[gauge] = set(series)
        for gauge, previous in self._written.items():
            for label_set in previous - written.get(gauge, set()):
                gauge.remove(*label_set)
        self._written = written

    def clear(self) -> None:
        """Remove every label set this exporter wrote (the monitor is stopping); zero the summary."""
        _export_summary(LagSnapshot(taken_ms=0, groups=()))
        for gauge, previous in self._written.items():
            for label_set in previous:
                gauge.remove(*label_set)
        self._written = {}


def _export_summary(snapshot: LagSnapshot) -> None:
    """The cluster-wide figures: counts by status, total lag, worst lag seconds, groups over limits."""
    groups = collections.Counter(g.status for g in snapshot.groups)
    partitions = collections.Counter(p.status for g in snapshot.groups for p in g.partitions)
    for status in GROUP_STATUSES:
        GROUPS.labels(status.value).set(groups[status])
    for status in PARTITION_STATUSES:
        PARTITIONS.labels(status.value).set(partitions[status])
    TOTAL_LAG.set(sum(g.total_lag for g in snapshot.groups))
    known = [s for g in snapshot.groups if (s := g.max_lag_seconds) is not None]
    MAX_LAG_SECONDS.set(max(known, default=0.0))
    GROUPS_OVER_THRESHOLD.set(sum(1 for g in snapshot.groups if g.over_threshold))
