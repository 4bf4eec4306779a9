"""Prometheus metrics of the audit webhook ingress (`reverser_audit_*`).

The `route` label carries only declared route names (anything else is `-`), so a client posting
to random paths cannot blow up the label cardinality.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "ADMISSION_REVIEWS",
    "ADMISSION_SECONDS",
    "BATCH_EVENTS",
    "COLLECTION_WITHOUT_UIDSET",
    "CONNECTIONS_CLOSED",
    "CONNECTIONS_REFUSED",
    "EVENTS",
    "FACTS_PUBLISHED",
    "INFLIGHT_BODY_BYTES",
    "OPEN_CONNECTIONS",
    "RECEIVED_BYTES",
    "RECORDS_PUBLISHED",
    "REJECTED_REQUESTS",
    "REQUESTS",
    "REQUEST_SECONDS",
    "UNDECLARED_ROUTE",
]

UNDECLARED_ROUTE = "-"

REQUESTS = Counter(
    "reverser_audit_requests_total",
    "Audit webhook requests answered, by route and HTTP status code.",
    ["route", "code"],
)
EVENTS = Counter(
    "reverser_audit_events_total",
    "Audit events, each counted once with its outcome reason and category.",
    ["route", "reason", "category"],
)
FACTS_PUBLISHED = Counter(
    "reverser_audit_facts_published_total",
    "Author facts acknowledged by the log.",
    ["route"],
)
RECORDS_PUBLISHED = Counter(
    "reverser_audit_records_published_total",
    "fact_batch records acknowledged by the log (one per group/resource per request, more when split).",
    ["route"],
)
REQUEST_SECONDS = Histogram(
    "reverser_audit_request_duration_seconds",
    "Time from receiving a request's headers to answering it, by route.",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0),
)
BATCH_EVENTS = Histogram(
    "reverser_audit_batch_events",
    "Events per decoded EventList, by route.",
    ["route"],
    buckets=(0, 1, 5, 10, 25, 50, 100, 200, 400, 800, 1600, 5000),
)
RECEIVED_BYTES = Counter(
    "reverser_audit_received_bytes_total",
    "Request body bytes read, by route.",
    ["route"],
)
COLLECTION_WITHOUT_UIDSET = Counter(
    "reverser_audit_collection_without_uidset_total",
    "deletecollection facts whose list response gave no uid set (uid_cap: too many items; no_uids: none).",
    ["reason"],
)
REJECTED_REQUESTS = Counter(
    "reverser_audit_rejected_requests_total",
    "Requests refused before their events were reduced, by route and reason (see docs/audit-ingress.md).",
    ["route", "reason"],
)
INFLIGHT_BODY_BYTES = Gauge(
    "reverser_audit_inflight_body_bytes",
    "Request body bytes held by the requests being served (bounded by audit.max_inflight_body_bytes).",
)
OPEN_CONNECTIONS = Gauge(
    "reverser_audit_open_connections",
    "Connections admitted and open (bounded by audit.max_connections).",
)
CONNECTIONS_REFUSED = Counter(
    "reverser_audit_connections_refused_total",
    "Connections closed as soon as established: the peer's limit was reached (peer_limit), or "
    "audit.max_connections were open and every one was serving a request (all_busy).",
    ["reason"],
)
CONNECTIONS_CLOSED = Counter(
    "reverser_audit_connections_closed_total",
    "Admitted connections the ingress closed: dropped while idle to admit a new one at the cap "
    "(idle_evicted), or after a request refused before its caller was authorized (rejected_request).",
    ["reason"],
)

ADMISSION_REVIEWS = Counter(
    "reverser_admission_reviews_total",
    "Admission reviews by outcome (the reasons of reverser_audit_events_total); every review is "
    "answered allowed, a write_error one too (its fact is lost).",
    ["route", "reason", "category"],
)
ADMISSION_SECONDS = Histogram(
    "reverser_admission_review_seconds",
    "Time to answer one admission review, fact appended included (the write waits for it).",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
