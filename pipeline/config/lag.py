"""The `lag` section: the consumer-lag monitor (docs/lag.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from pipeline.config.section import Section, check_pattern


class LagThreshold(Section):
    """A lag-seconds limit for the groups matching `group` (re.search; the first matching entry wins)."""

    group: str
    """Regular expression (re.search) of the consumer groups the limit applies to."""
    max_lag_s: float = Field(gt=0)
    """Lag in seconds above which the group is reported over its limit."""

    @field_validator("group")
    @classmethod
    def _pattern(cls, pattern: str) -> str:
        return check_pattern(pattern)


class LagSettings(Section):
    """The consumer-lag monitor (see docs/lag.md).

    `allow`/`deny` are regular expressions (re.search) over group names; they bound the metric
    label cardinality. `window` is the number of commits Burrow's rules look at; `history_points`
    bounds the per-partition log-end offset history behind lag in seconds. `thresholds` give
    groups a lag-seconds limit; `cluster_name` names the cluster in Burrow's HTTP API, served on
    the metrics port while `burrow_api` is true.
    """

    enabled: bool = True
    """Run the consumer-lag monitor inside `reverser run`."""
    poll_interval_s: float = Field(default=30.0, gt=0)
    """How often offsets are read, in seconds."""
    window: int = Field(default=10, ge=2)
    """Offset snapshots a partition's status is judged over (Burrow's window)."""
    history_points: int = Field(default=60, ge=2, le=10_000)
    """Snapshots kept per partition for lag-in-seconds estimates."""
    allow: list[str] = [".*"]
    """Regular expressions of the consumer groups monitored."""
    deny: list[str] = []
    """Regular expressions of consumer groups left out (checked after allow)."""
    thresholds: list[LagThreshold] = []
    """Lag-seconds limits per group pattern; the first matching entry wins."""
    kafka_lag_exporter_names: bool = False
    """Also export the metrics under kafka-lag-exporter's names."""
    cluster_name: str = Field(default="local", pattern=r"^[A-Za-z0-9._-]+$")
    """Cluster name in Burrow's API paths and the metrics."""
    burrow_api: bool = True
    """Serve Burrow's v3 read API on the metrics port."""

    @field_validator("allow", "deny")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            check_pattern(pattern)
        return patterns
