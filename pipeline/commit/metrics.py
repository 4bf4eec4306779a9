"""Prometheus metrics of the commit worker (`reverser_commit_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

COMMITS = Counter(
    "reverser_commit_commits_total",
    "Local commits made, by author kind (user, serviceaccount, committer, unresolved).",
    ["provider", "branch", "author_kind"],
)
WINDOW_CLOSES = Counter(
    "reverser_commit_window_closes_total",
    "Commit windows closed, by reason.",
    ["provider", "branch", "reason"],
)
PUSHES = Counter(
    "reverser_commit_pushes_total",
    "Push attempts by result (ok, rejected, auth_error, error).",
    ["provider", "branch", "result"],
)
PUSH_SECONDS = Histogram(
    "reverser_commit_push_seconds",
    "Wall time of one push attempt.",
    ["provider", "branch"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
END_TO_END_SECONDS = Histogram(
    "reverser_commit_end_to_end_seconds",
    "From the watch event (source.observedAtMs) to the push that published it.",
    ["provider", "branch"],
    buckets=(0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300),
)
PENDING = Gauge(
    "reverser_commit_pending_work",
    "Work records of a branch received but not yet pushed (or found to change nothing).",
    ["provider", "branch"],
)
REBASES = Counter(
    "reverser_commit_rebases_total",
    "Unpushed commits replayed onto a remote tip that moved.",
    ["provider", "branch"],
)
SKIPPED = Counter(
    "reverser_commit_skipped_total",
    "Work records skipped, by reason (already_committed, bad_record, unknown_provider, "
    "stale_snapshot, superseded_snapshot, incomplete_snapshot, prune_never, path_conflict, "
    "sensitive_unencrypted, older_version).",
    ["reason"],
)
SWEEP_DELETES = Counter(
    "reverser_commit_sweep_deletes_total",
    "Documents removed by a snapshot's mark-and-sweep (prune mode Always).",
    ["target", "group", "resource"],
)
RETAINED = Counter(
    "reverser_commit_prune_retained_total",
    "Orphan documents a snapshot kept because the target's prune mode is not Always.",
    ["target", "prune_mode"],
)
