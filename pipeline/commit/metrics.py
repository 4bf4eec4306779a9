"""Prometheus metrics of the commit worker (`reverser_commit_*`)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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


class PushResult(StrEnum):
    """How a push ended (the `result` label of `reverser_commit_pushes_total`)."""

    OK = "ok"
    REJECTED = "rejected"
    AUTH_ERROR = "auth_error"
    ERROR = "error"


class SkipReason(StrEnum):
    """Why a work record was skipped (the `reason` label of `reverser_commit_skipped_total`)."""

    ALREADY_COMMITTED = "already_committed"
    BAD_RECORD = "bad_record"
    UNKNOWN_PROVIDER = "unknown_provider"
    STALE_SNAPSHOT = "stale_snapshot"
    SUPERSEDED_SNAPSHOT = "superseded_snapshot"
    INCOMPLETE_SNAPSHOT = "incomplete_snapshot"
    PRUNE_NEVER = "prune_never"
    PATH_CONFLICT = "path_conflict"
    SENSITIVE_UNENCRYPTED = "sensitive_unencrypted"
    SEALED_PLAINTEXT = "sealed_plaintext"
    OLDER_VERSION = "older_version"
    DELETED_TARGET = "deleted_target"
    OPERATION_FILTERED = "operation_filtered"


MESSAGE_FALLBACKS = Counter(
    "reverser_commit_message_template_fallbacks_total",
    "Commits whose Go message template (eventTemplate, groupTemplate, reconcileTemplate) failed on "
    "their data or rendered nothing, so gitops-reverser's default template wrote the message.",
    ["target", "kind"],
)
CREDENTIALS_ERRORS = Counter(
    "reverser_commit_credentials_errors_total",
    "Times a provider's credentials from its Secret were unusable, by reason (not_found, forbidden, "
    "unreachable, missing_key, no_known_hosts, invalid_key; rejected: the remote refused them).",
    ["provider", "reason"],
)


class LateNoteResult(StrEnum):
    """What a `LateAuthor` record did (the `result` label of `reverser_commit_late_notes_total`)."""

    NOTED = "noted"  # a note line naming the author was written and pushed
    ALREADY = "already_noted"  # a redelivery or replay: the note already names an author for it
    NO_COMMIT = "no_commit"  # no pushed commit carries the change (it changed nothing)


LATE_NOTES = Counter(
    "reverser_commit_late_notes_total",
    "Late authors of changes committed as unresolved, recorded as git notes, by result.",
    ["provider", "branch", "result"],
)
LATE_DELAY_SECONDS = Histogram(
    "reverser_commit_late_resolution_delay_seconds",
    "From the watch event of a change committed as unresolved to the late fact that named its author "
    "(as the router measured it), for each note written.",
    ["provider", "branch"],
    buckets=(5, 10, 15, 20, 30, 45, 60, 120, 300, 600),
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
STATE_RECORDS = Counter(
    "reverser_commit_object_state_records_total",
    "Records (versions and tombstones) written to <prefix>.object-state after their work was pushed.",
)
RECEIVE_DELAY_SECONDS = Histogram(
    "reverser_commit_receive_delay_seconds",
    "From the watch event (source.observedAtMs) to its branch's FIFO taking the record: the time "
    "spent in attribution, the router and the log; the rest of end-to-end is window and push.",
    ["provider", "branch"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
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
    "sensitive_unencrypted, sealed_plaintext, older_version, deleted_target, operation_filtered).",
    ["reason"],
)
DEAD_LETTERED = Counter(
    "reverser_commit_dead_lettered_total",
    "Work records parked on the dead-letter topic once the log acknowledged them, by reason "
    "(undecodable, unknown_provider, unappliable).",
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
NOT_OURS_KEPT = Counter(
    "reverser_commit_not_ours_kept_total",
    "Files a sweep, a retired target or a rebuild would have deleted but kept: they do not parse as "
    "the one object their path names, so they are a user's files (docs/commit-worker.md).",
    ["target"],
)
IN_PLACE_WRITES = Counter(
    "reverser_commit_in_place_writes_total",
    "Changes written into a file the pipeline does not own (docs/intent.md), by kind (in-place, "
    "removed-document, removed-file, overlay-entry, new-file, appended).",
    ["target", "kind"],
)


class BuildOutcome(StrEnum):
    """How one `kustomize build` of the render check ended (`reverser_commit_kustomize_builds_total`)."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"


KUSTOMIZE_BUILDS = Counter(
    "reverser_commit_kustomize_builds_total",
    "kustomize builds of the render check (two per touched render root and edit), by outcome "
    "(ok, failed, timeout).",
    ["target", "outcome"],
)
KUSTOMIZE_BUILD_SECONDS = Histogram(
    "reverser_commit_kustomize_build_seconds",
    "Wall time of one kustomize build of the render check, including a build that failed.",
    ["target"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
IN_PLACE_REFUSALS = Counter(
    "reverser_commit_in_place_refusals_total",
    "Changes the in-place writer refused before writing anything (the record is dead-lettered), by "
    "reason (OwnedByAnotherTool, SharedBase, UnsupportedKustomization, AmbiguousHome, "
    "NotRoundTripSafe, RenderMismatch, ...; docs/intent.md).",
    ["target", "reason"],
)
SNAPSHOT_DELETES = Counter(
    "reverser_commit_snapshot_deletes_total",
    "Files this pipeline wrote that a snapshot no longer lists, deleted under prune mode OnEvent as a "
    "watch DELETE would, by the kind of author the deletion evidence names (unresolved: none).",
    ["target", "author_kind"],
)


class Owner(Protocol):
    """A commit worker, as the ownership gauges see it."""

    def owned_partitions(self) -> Iterable[tuple[str, int]]: ...

    def owned_branches(self) -> Iterable[tuple[str, str]]: ...

    def parked_providers(self) -> Iterable[tuple[str, str]]:
        """(provider, reason) of every provider parked while the worker runs."""
        ...


_owners: weakref.WeakSet[Owner] = weakref.WeakSet()


def register_owner(owner: Owner) -> None:
    """Report `owner`'s partitions, branches and parked providers at every scrape (a collected
    worker drops out)."""
    _owners.add(owner)


class _OwnershipCollector(Collector):
    """Which branch-work partitions and branches this replica works on, read at scrape time.

    Summed over replicas, each partition is owned exactly once; a rebalance after a kill shows up
    as the partitions moving to the survivors.
    """

    def collect(self) -> Iterator[Metric]:
        partitions = GaugeMetricFamily(
            "reverser_commit_owned_partition",
            "1 for each branch-work partition assigned to this replica's commit worker",
            labels=["topic", "partition"],
        )
        count = GaugeMetricFamily(
            "reverser_commit_owned_partitions",
            "Number of branch-work partitions assigned to this replica's commit worker",
        )
        branches = GaugeMetricFamily(
            "reverser_commit_owned_branch",
            "1 for each (provider, branch) whose FIFO runs on this replica",
            labels=["provider", "branch"],
        )
        parked = GaugeMetricFamily(
            "reverser_commit_provider_parked",
            "1 while a provider is parked because its access cannot be built (reason missing_key: a "
            "key variable unset or a key file unreadable; invalid_key: a key that cannot sign; "
            "unreachable): its branches wait on the log while every other provider goes on",
            labels=["provider", "reason"],
        )
        owned_partitions: set[tuple[str, int]] = set()
        owned_branches: set[tuple[str, str]] = set()
        parked_providers: set[tuple[str, str]] = set()
        for owner in list(_owners):
            owned_partitions.update(owner.owned_partitions())
            owned_branches.update(owner.owned_branches())
            parked_providers.update(owner.parked_providers())
        for topic, partition in sorted(owned_partitions):
            partitions.add_metric([topic, str(partition)], 1.0)
        count.add_metric([], float(len(owned_partitions)))
        for provider, branch in sorted(owned_branches):
            branches.add_metric([provider, branch], 1.0)
        for provider, reason in sorted(parked_providers):
            parked.add_metric([provider, reason], 1.0)
        yield partitions
        yield count
        yield branches
        yield parked


REGISTRY.register(_OwnershipCollector())
