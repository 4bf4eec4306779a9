"""Prometheus metrics of the resolver/router stage."""

from enum import StrEnum

from prometheus_client import Counter, Gauge, Histogram

RECORDS = Counter("reverser_router_records_total", "Watch-event records consumed, by record kind.", ["kind"])
WORK_ITEMS = Counter(
    "reverser_router_work_items_total",
    "Branch-work items appended, by provider and branch.",
    ["provider", "branch"],
)


class DropReason(StrEnum):
    """Why a watch-event record produced no work (the `reason` label of `reverser_router_dropped_total`)."""

    RETENTION_GAP = "retention_gap"
    UNKNOWN_TARGET = "unknown_target"


DROPPED = Counter(
    "reverser_router_dropped_total", "Watch-event records that produced no work, by reason.", ["reason"]
)
DECODE_ERRORS = Counter(
    "reverser_router_decode_errors_total", "Watch-event records that could not be decoded (dead-lettered)."
)
DEAD_LETTERED = Counter(
    "reverser_router_dead_lettered_total",
    "Watch-event records parked on the dead-letter topic, counted once the log acknowledged them.",
)
APPEND_ERRORS = Counter(
    "reverser_router_append_errors_total", "Failed appends of branch work (retried with backoff)."
)
FENCED = Counter(
    "reverser_router_fenced_total",
    "Transactions of an input partition refused because another router took the partition over; "
    "the work is dropped here and re-read from the committed offset by the partition's owner.",
)
IN_FLIGHT = Gauge(
    "reverser_router_in_flight", "Watch events read but not yet emitted (waiting for attribution or order)."
)
SNAPSHOT_CHANGES = Counter(
    "reverser_router_snapshot_changes_total",
    "Snapshot objects that changed while the watch was down (newer than the stream's cursor), by "
    "outcome: attributed to the author a fact names, or unresolved (no fact within the maximum wait).",
    ["outcome"],
)
EMIT_DELAY = Histogram(
    "reverser_router_emit_delay_seconds",
    "From the watch event (observedAtMs) to the router's transaction carrying its work committing: "
    "the watch-events hop, attribution and the router's ordering and transaction.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
ATTRIBUTION_MODE = Gauge(
    "reverser_router_attribution_mode",
    "1 for each routed target and the attribution mode of its commits (audit: the audit facts name the "
    "author; configured-author: the provider's committer, without waiting).",
    ["target", "mode"],
)
NOT_ATTEMPTED = Counter(
    "reverser_router_attribution_not_attempted_total",
    "Watch-event records routed without asking the fact index because their target is in "
    "configured-author mode, by target.",
    ["target"],
)
