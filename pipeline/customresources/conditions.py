"""A GitTarget's conditions as gitops-reverser's users read them.

GR (v0.41 line) gives a GitTarget, besides the kstatus trio (`Ready`, `Reconciling`,
`Stalled`), one condition per gate: `Validated` (provider, branch, folder), `EncryptionConfigured`,
`GitPathAccepted` (the folder is this target's to write), `StreamsRunning` (every watched type
streams) and `GitProviderReady` (the remote takes our pushes). Dashboards, `kubectl wait
--for=condition=...` and `kubectl get` columns read those names, so they are written here with
GR's reasons where GR names one, and `Ready` summarises them: it is never True while the last push
failed or a stream is blocked (backing off: forbidden, gone, failing), which an operator would
otherwise only learn from the metrics. Streams that are still listing keep `Ready` as it is and
`Reconciling` True, as in kstatus. A change the commit worker refused to write into the folder (an
unmodelled kustomization, a render mismatch: docs/commit-worker.md) makes the target `Stalled`,
with the refusal's reason and a message naming the file, until a later change of it commits: only
the user can fix the folder. Pure: the status writer supplies what the log reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pipeline.codec.target_result import PushOutcome, TargetRefusal, TargetResult
from pipeline.customresources.compile import ObjectReport

__all__ = ["ConditionType", "Reason", "TargetStream", "target_conditions"]


class ConditionType(StrEnum):
    """GR's GitTarget condition types."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    VALIDATED = "Validated"
    ENCRYPTION_CONFIGURED = "EncryptionConfigured"
    GIT_PATH_ACCEPTED = "GitPathAccepted"
    STREAMS_RUNNING = "StreamsRunning"
    GIT_PROVIDER_READY = "GitProviderReady"


class Reason(StrEnum):
    """The reasons written (GR's spelling where GR has one)."""

    SUCCEEDED = "Succeeded"
    INVALID_CONFIG = "InvalidConfig"
    PROVIDER_NOT_FOUND = "ProviderNotFound"
    BRANCH_NOT_ALLOWED = "BranchNotAllowed"
    TARGET_CONFLICT = "TargetConflict"
    NOT_REQUIRED = "NotRequired"
    NOT_CHECKED = "NotChecked"
    GIT_PATH_ACCEPTED = "GitPathAccepted"
    NOT_READY = "NotReady"
    BLOCKED = "Blocked"
    NOT_STARTED = "NotStarted"
    PUSH_FAILED = "PushFailed"
    GIT_PROVIDER_NOT_READY = "GitProviderNotReady"
    VALIDATION_FAILED = "ValidationFailed"
    STREAMS_NOT_RUNNING = "StreamsNotRunning"
    STREAMS_STARTING = "StreamsStarting"
    STREAMS_RUNNING = "StreamsRunning"


@dataclass(frozen=True, slots=True)
class TargetStream:
    """One stream of the target: how it is shown, and its state as its cluster's leader reported
    it (`Streaming`, `Replaying`, `Backoff`, `Stopped`, each with `: why`; empty: not reported)."""

    described: str
    state: str

    @property
    def phase(self) -> str:
        """The state's name, without the reason."""
        return self.state.partition(":")[0].strip()


_BLOCKED = frozenset({"Backoff", "Stopped"})


def _condition(
    kind: ConditionType, status: bool, reason: str, message: str, generation: int
) -> dict[str, Any]:
    """One condition; `reason` is a `Reason`, or a refusal's own reason for `Stalled`."""
    return {
        "type": kind.value,
        "status": "True" if status else "False",
        "reason": str(reason),
        "message": message,
        "observedGeneration": generation,
    }


def _validation_reason(report: ObjectReport) -> Reason:
    """GR's `Validated` reason for the object's first error."""
    first = report.errors[0]
    if first.path.startswith(("spec.providerRef", "spec.gitProviderRef")):
        return Reason.PROVIDER_NOT_FOUND
    if first.path == "spec.branch" and "allowedBranches" in first.message:
        return Reason.BRANCH_NOT_ALLOWED
    if first.path == "spec.path" and "which keeps it" in first.message:
        return Reason.TARGET_CONFLICT
    return Reason.INVALID_CONFIG


def _refused(refusal: TargetRefusal) -> str:
    return (
        f"the commit worker refused to write {refusal.object} into {refusal.file} ({refusal.reason}); "
        "its change waits on the dead-letter topic until the folder or the rule is fixed"
    )


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def target_conditions(
    report: ObjectReport,
    encrypted: bool,
    streams: Sequence[TargetStream] | None,
    result: TargetResult | None,
) -> list[dict[str, Any]]:
    """The GitTarget's conditions, `Ready` first. `streams` is None when the controller does not know
    the target's streams (no rule resolved yet), `result` the commit worker's last push report."""
    generation = report.generation
    if report.errors:
        message = "; ".join(e.describe() for e in report.errors)
        blocked = "Blocked by Validated=False"
        return [
            _condition(ConditionType.READY, False, Reason.VALIDATION_FAILED, message, generation),
            _condition(ConditionType.RECONCILING, False, Reason.VALIDATION_FAILED, blocked, generation),
            _condition(ConditionType.STALLED, True, Reason.VALIDATION_FAILED, message, generation),
            _condition(ConditionType.VALIDATED, False, _validation_reason(report), message, generation),
            _condition(ConditionType.GIT_PATH_ACCEPTED, False, Reason.NOT_CHECKED, blocked, generation),
            _condition(
                ConditionType.STREAMS_RUNNING,
                False,
                Reason.NOT_READY,
                f"{blocked}; streams not evaluated",
                generation,
            ),
        ]
    validated = _condition(
        ConditionType.VALIDATED,
        True,
        Reason.SUCCEEDED,
        "provider, branch and path validation passed",
        generation,
    )
    encryption = (
        _condition(
            ConditionType.ENCRYPTION_CONFIGURED,
            True,
            Reason.SUCCEEDED,
            "encryption configuration is valid",
            generation,
        )
        if encrypted
        else _condition(
            ConditionType.ENCRYPTION_CONFIGURED,
            True,
            Reason.NOT_REQUIRED,
            "SOPS encryption is not enabled for this GitTarget",
            generation,
        )
    )
    accepted = _condition(
        ConditionType.GIT_PATH_ACCEPTED,
        True,
        Reason.GIT_PATH_ACCEPTED,
        "the folder is this target's to write",
        generation,
    )
    known = list(streams or ())
    blocked_streams = [f"{s.described} ({s.state})" for s in known if s.phase in _BLOCKED]
    starting = [s.described for s in known if s.phase not in _BLOCKED and s.phase != "Streaming"]
    if streams is None or not known:
        running = _condition(
            ConditionType.STREAMS_RUNNING,
            False,
            Reason.NOT_STARTED,
            "no stream resolved for this target",
            generation,
        )
    elif blocked_streams:
        text = f"{len(blocked_streams)} of {len(known)} streams blocked: {_shown(blocked_streams)}"
        running = _condition(ConditionType.STREAMS_RUNNING, False, Reason.BLOCKED, text, generation)
    elif starting:
        text = f"{len(starting)} of {len(known)} streams not streaming yet: {_shown(starting)}"
        running = _condition(ConditionType.STREAMS_RUNNING, False, Reason.NOT_READY, text, generation)
    else:
        running = _condition(
            ConditionType.STREAMS_RUNNING, True, Reason.SUCCEEDED, f"{len(known)} streams running", generation
        )
    push_failed = result is not None and result.push == PushOutcome.FAILED
    pushed = result is not None and result.push == PushOutcome.SUCCEEDED
    refusal = result.refusal if result is not None else None
    if push_failed:
        assert result is not None
        provider = _condition(
            ConditionType.GIT_PROVIDER_READY,
            False,
            Reason.PUSH_FAILED,
            result.message or "the last push failed",
            generation,
        )
    else:
        provider = _condition(
            ConditionType.GIT_PROVIDER_READY,
            True,
            Reason.SUCCEEDED,
            "the last push succeeded" if pushed else "no push yet",
            generation,
        )
    if push_failed:
        ready = _condition(
            ConditionType.READY, False, Reason.GIT_PROVIDER_NOT_READY, provider["message"], generation
        )
    elif refusal is not None:
        ready = _condition(ConditionType.READY, False, refusal.reason, _refused(refusal), generation)
    elif blocked_streams:
        ready = _condition(
            ConditionType.READY, False, Reason.STREAMS_NOT_RUNNING, running["message"], generation
        )
    else:
        ready = _condition(
            ConditionType.READY, True, Reason.SUCCEEDED, "GitTarget is fully reconciled", generation
        )
    if starting:
        reconciling = _condition(
            ConditionType.RECONCILING, True, Reason.STREAMS_STARTING, running["message"], generation
        )
    else:
        reconciling = _condition(
            ConditionType.RECONCILING, False, Reason.STREAMS_RUNNING, running["message"], generation
        )
    if refusal is not None:
        stalled = _condition(ConditionType.STALLED, True, refusal.reason, _refused(refusal), generation)
    else:
        stalled = _condition(
            ConditionType.STALLED, False, Reason.SUCCEEDED, "GitTarget is not stalled", generation
        )
    return [ready, reconciling, stalled, validated, encryption, accepted, running, provider]
