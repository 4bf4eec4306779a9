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


class LateOutcome(StrEnum):
    """What became of a change emitted as unresolved (the `outcome` label of the late counter)."""

    RESOLVED = "resolved"  # a fact pinned it later: a LateAuthor record was appended
    EXPIRED = "expired"  # no fact within the late window
    DROPPED = "dropped"  # not watched: the late watches were at their cap


LATE = Counter(
    "reverser_router_late_resolutions_total",
    "Changes emitted as unresolved, by what became of them: a fact that arrived after the hold named "
    "the author (resolved), none did within the late window (expired), or the watch cap was reached.",
    ["outcome"],
)
LATE_DELAY = Histogram(
    "reverser_router_late_resolution_delay_seconds",
    "From the watch event (observedAtMs) to the late fact that named its author: how far behind the "
    "hold audit delivery was.",
    buckets=(5, 10, 15, 20, 30, 45, 60, 120, 300, 600),
)
LATE_WATCHES = Gauge(
    "reverser_router_late_watches", "Changes emitted as unresolved whose late fact is still awaited."
)
