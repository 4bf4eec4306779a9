"""Prometheus metrics of the fact index, the follower and the resolver (`reverser_attribution_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "CONFLICTS",
    "DECODE_ERRORS",
    "EVICTIONS",
    "FOLLOWER_ERRORS",
    "HOLDS_EXPIRED",
    "INDEX_ENTRIES",
    "INDEX_READY",
    "LAST_SUCCESS",
    "MATCHED",
    "REPLAY_APPLIED",
    "REPLAY_ETA",
    "REPLAY_RATE",
    "REPLAY_REMAINING",
    "RESOLUTIONS",
    "STREAM_GAPS",
    "TRANSPORT_INFO",
    "WAIT_SECONDS",
]

RESOLUTIONS = Counter(
    "reverser_attribution_resolutions",
    "Watch events attributed, by the tier that matched and the kind of actor named.",
    ["tier", "actor_kind", "group", "version", "resource"],
)
WAIT_SECONDS = Histogram(
    "reverser_attribution_resolution_wait_seconds",
    "Wall time of one resolution including the grace wait.",
    ["tier", "event_kind", "group", "version", "resource"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10),
)
MATCHED = Counter(
    "reverser_attribution_facts_matched",
    "Resolutions that named a fact (every tier except absent, settled fallbacks included).",
)
INDEX_ENTRIES = Gauge(
    "reverser_attribution_fact_index_entries",
    "Entries held by the fact index (updated on every sweep).",
)
INDEX_READY = Gauge(
    "reverser_attribution_fact_index_ready",
    "1 once the start-up replay of the fact topic has caught up (the process resolves authors), else 0.",
)
EVICTIONS = Counter(
    "reverser_attribution_fact_index_evictions",
    "Index entries evicted by a cap, oldest first.",
    ["reason"],
)
STREAM_GAPS = Counter(
    "reverser_attribution_stream_gaps",
    "Fact records deleted by retention before this process read them.",
    ["stream"],
)
DECODE_ERRORS = Counter(
    "reverser_attribution_fact_stream_decode_errors",
    "Fact records refused (undecodable, or a fact without an author) and skipped.",
    ["transport"],
)
FOLLOWER_ERRORS = Counter(
    "reverser_attribution_fact_follower_errors",
    "Failed read rounds of the fact follower (it retries after one second).",
    ["transport"],
)
LAST_SUCCESS = Gauge(
    "reverser_attribution_fact_follower_last_success_timestamp_seconds",
    "Unix time of the follower's last successful read round, idle rounds included.",
)
TRANSPORT_INFO = Gauge(
    "reverser_attribution_transport_info",
    "The log backend the fact follower reads (always 1).",
    ["transport"],
)
REPLAY_APPLIED = Gauge(
    "reverser_attribution_replay_applied_records",
    "Fact records applied by the start-up replay (frozen once the follower is ready).",
)
REPLAY_REMAINING = Gauge(
    "reverser_attribution_replay_remaining_records",
    "Fact records still to read before the follower has caught up with the end offsets it saw at start.",
)
REPLAY_RATE = Gauge(
    "reverser_attribution_replay_rate_records_per_second",
    "Records applied per second during the start-up replay.",
)
REPLAY_ETA = Gauge(
    "reverser_attribution_replay_eta_seconds",
    "Estimated seconds until the start-up replay has caught up (0 once ready).",
)
CONFLICTS = Counter(
    "reverser_attribution_fact_conflicts",
    "Object versions (or deletions) claimed by facts of two different users; such events resolve to no one.",
    ["route"],
)
HOLDS_EXPIRED = Counter(
    "reverser_attribution_holds_expired",
    "Resolutions settled at attribution.max_wait_ms while the route's audit watermark had not yet "
    "reached the event's time (audit far behind, an ingress outage, or a route without traffic).",
    ["route"],
)
