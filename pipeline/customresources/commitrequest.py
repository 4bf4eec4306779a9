"""CommitRequests: gitops-reverser's "save now", turned into a record on the target's branch.

A CommitRequest names a GitTarget in its own namespace. The controller checks it (the same rules
as gitops-reverser's schema: `spec.message` of 1-1024 characters with no control character but
newline and not only whitespace, `closeDelaySeconds` 0-300), then appends one `CommitRequested`
record to `<prefix>.branch-work`, keyed by the target's (provider, branch): the commit worker that
owns the branch closes the target's open window when it reaches the record, so "now" is the
log's order, after every change routed before the request (pipeline/commit/flush.py). What became
of it comes back on the config topic (`commitrequest/<namespace>/<name>`) and lands in its status:
`sha` and `branch`, and the conditions gitops-reverser's users read (`Ready`, `Reconciling`,
`Stalled`, `AuthorAttributed`, `Pushed`).

A request is sent once: its status then says `Reconciling` `Requested`, so neither a restarted
controller nor a new leader sends it again (the controller also remembers what it sent until the
status shows it). Should a crash fall between the append and that status write, the request is
sent twice; the second finds the window already closed, and a status that already names a commit
is never replaced by a later result.

The author: gitops-reverser names the submitter it captured at admission (its own webhook). Here
the submitter is the user of the fact of the request's create (an admission fact, or an audit
event), found in the fact index by the object's uid when the controller first handles it, waiting
at most `AUTHOR_WAIT_S` for the fact to reach the index (`decide_author`). Found: the request
claims that actor (`AuthorAttributed=True`, `AttributedFromAdmission`, or `AttributedFromAuditEvent`
for an audit event). Not found: it claims no actor, `CommitterFallback` when the CommitRequests'
cluster delivers facts (attribution mode `audit`), `AuthorCaptureDisabled` when it does not. As in
gitops-reverser the condition does not choose the Git author: the commit is authored by the
window's own author either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from prometheus_client import Counter

from pipeline.codec.branch_work import CommitRequested, WorkItem
from pipeline.codec.commit_request_result import RequestOutcome, RequestResult
from pipeline.config import Settings
from pipeline.customresources.objects import GROUP, VERSION, CustomResource, Kind, ObjectRef, effective_name
from pipeline.customresources.problems import FieldProblem
from pipeline.kube.client import KubeClient, KubeError

__all__ = [
    "AUTHOR_WAIT_S",
    "HANDLED",
    "MAX_CLOSE_DELAY_S",
    "MAX_MESSAGE_CHARS",
    "Handled",
    "Request",
    "RequestStatusWriter",
    "Submitter",
    "check_lines",
    "decide_author",
    "read_request",
    "recorded_author",
    "request_status",
    "request_work",
]

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1024
MAX_CLOSE_DELAY_S = 300
#: The longest the controller waits for the fact of a request's create to reach the fact index
#: before it sends the request without an actor, in seconds (an admission fact is on the log before
#: the object is stored, so this covers the follower's reading of it, not the apiserver).
AUTHOR_WAIT_S = 2.0
#: The `Reconciling` reason that marks a request as sent (its record is on the log).
REQUESTED = "Requested"
_MERGE_PATCH = "application/merge-patch+json"


class Handled(StrEnum):
    """What the controller did with a CommitRequest (the `outcome` label), once per object."""

    SENT = "sent"
    INVALID = "invalid"


HANDLED = Counter(
    "reverser_config_commit_requests_total",
    "CommitRequests the controller sent to their branch, or refused for a field (once per object)",
    ["outcome"],
)


@dataclass(frozen=True, slots=True)
class Request:
    """A checked CommitRequest: which object, for which GitTarget (same namespace), how."""

    ref: ObjectRef
    uid: str
    generation: int
    git_target: str
    message: str
    close_delay_s: int

    def sent(self, status: Mapping[str, Any]) -> bool:
        """Whether `status` shows the request already sent or finished."""
        conditions = {c.get("type"): c for c in status.get("conditions", []) if isinstance(c, dict)}
        reconciling = conditions.get("Reconciling", {})
        return reconciling.get("reason") == REQUESTED or bool(status.get("sha")) or _finished(conditions)


def _finished(conditions: Mapping[Any, Mapping[str, Any]]) -> bool:
    return conditions.get("Reconciling", {}).get("status") == "False" and "Ready" in conditions


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, str):
        return "must be a string"
    if not 1 <= len(message) <= MAX_MESSAGE_CHARS:
        return f"must be 1-{MAX_MESSAGE_CHARS} characters, got {len(message)}"
    if any((ord(c) < 0x20 and c != "\n") or ord(c) == 0x7F for c in message):
        return "may hold newlines but no other control character (tab and carriage return included)"
    if not message.strip():
        return "must contain a non-whitespace character"
    return None


def read_request(resource: CustomResource) -> Request | list[FieldProblem]:
    """The request of one CommitRequest object, or the problems of the fields its user wrote."""
    spec = resource.spec
    problems: list[FieldProblem] = []
    where = "spec.gitTargetRef" if "gitTargetRef" in spec or "targetRef" not in spec else "spec.targetRef"
    ref = spec.get(where.removeprefix("spec."))
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str) or not name:
        problems.append(FieldProblem(f"{where}.name", "is required: the GitTarget in the same namespace"))
    message = spec.get("message", "")
    if "message" in spec and (problem := _message_problem(message)) is not None:
        problems.append(FieldProblem("spec.message", problem))
    delay = spec.get("closeDelaySeconds", 0)
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_CLOSE_DELAY_S:
        problems.append(FieldProblem("spec.closeDelaySeconds", f"must be an integer 0-{MAX_CLOSE_DELAY_S}"))
    if problems:
        return problems
    assert isinstance(name, str)
    assert isinstance(delay, int)
    return Request(resource.ref, resource.uid, resource.generation, name, str(message), delay)


def check_lines(resources: Iterable[CustomResource]) -> tuple[list[str], bool]:
    """`reverser config check`'s lines for CommitRequests (`ok` or each error) and whether any failed."""
    lines: list[str] = []
    failed = False
    for resource in sorted(resources, key=lambda r: r.ref):
        found = read_request(resource)
        if isinstance(found, Request):
            lines.append(f"{resource.ref.describe()}: ok")
            continue
        failed = True
        lines.extend(f"{resource.ref.describe()}: error: {problem.describe()}" for problem in found)
    return lines, failed


def request_work(request: Request, settings: Settings, home_namespace: str, now_ms: int) -> WorkItem | None:
    """The `CommitRequested` record of a request, on its target's branch; None while the
    effective configuration has no such target (missing, invalid, or not compiled yet)."""
    name = effective_name(request.ref.namespace, request.git_target, home_namespace)
    target = next((t for t in settings.targets if t.name == name), None)
    if target is None or not any(p.name == target.provider for p in settings.providers):
        return None
    _, branch, _ = settings.destination(target)
    body = CommitRequested(
        request.ref.namespace, request.ref.name, request.uid, request.message, request.close_delay_s
    )
    return WorkItem.for_target(target, branch, now_ms, body)


def _condition(kind: str, status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who created a CommitRequest, as the fact of its create names them."""

    user: str
    from_admission: bool


_WINDOW_AUTHOR = "the commit is authored by the window's own author"


def decide_author(capture: bool, submitter: Submitter | None, generation: int) -> dict[str, Any]:
    """The `AuthorAttributed` condition of a request (pure): `capture` says whether the cluster of
    the CommitRequests delivers facts at all, `submitter` what the fact of its create named."""
    if submitter is not None:
        source, reason = (
            ("admission", "AttributedFromAdmission")
            if submitter.from_admission
            else ("the audit event of its create", "AttributedFromAuditEvent")
        )
        text = f"submitter {submitter.user} captured at {source}; {_WINDOW_AUTHOR}"
        return _condition("AuthorAttributed", True, reason, text, generation)
    if capture:
        text = (
            f"no fact of the request's create reached the index within {AUTHOR_WAIT_S:g}s: the "
            f"request claims no actor and {_WINDOW_AUTHOR}"
        )
        return _condition("AuthorAttributed", False, "CommitterFallback", text, generation)
    text = (
        "no submitter is captured (the CommitRequests' cluster has attribution mode "
        f"configured-author): the request claims no actor and {_WINDOW_AUTHOR}"
    )
    return _condition("AuthorAttributed", False, "AuthorCaptureDisabled", text, generation)


def recorded_author(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `AuthorAttributed` condition a status already holds (without its transition time), so
    a request keeps the attribution decided when it was first handled."""
    for condition in status.get("conditions", []):
        if isinstance(condition, dict) and condition.get("type") == "AuthorAttributed":
            return {k: v for k, v in condition.items() if k != "lastTransitionTime"}
    return None


def request_status(
    generation: int,
    *,
    problems: Iterable[FieldProblem] = (),
    waiting_for: str = "",
    branch: str = "",
    result: RequestResult | None = None,
    author: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status of one CommitRequest (without transition times): pure, for tests and the writer.

    In order of precedence: invalid fields (terminal), a result of the commit worker, waiting for
    its GitTarget (`waiting_for` says why), else sent and waiting for the worker. `author` is the
    request's `AuthorAttributed` condition (`decide_author`); none: no capture.
    """
    status: dict[str, Any] = {"observedGeneration": generation}
    attributed = dict(author) if author is not None else decide_author(False, None, generation)
    found = list(problems)
    if found:
        text = "; ".join(p.describe() for p in found)
        status["conditions"] = [
            _condition("Ready", False, "Invalid", text, generation),
            _condition("Reconciling", False, "Invalid", text, generation),
            _condition("Stalled", True, "Invalid", text, generation),
            attributed,
        ]
        return status
    if result is not None:
        status["branch"] = result.branch
        if result.sha:
            status["sha"] = result.sha
        pushed = result.outcome is RequestOutcome.COMMITTED
        if result.outcome is RequestOutcome.COMMITTED:
            ready = _condition(
                "Ready", True, "Committed", f"commit {result.sha} is on {result.branch}", generation
            )
        elif result.outcome is RequestOutcome.NOTHING_TO_COMMIT:
            ready = _condition("Ready", True, "NothingToCommit", result.message, generation)
        else:
            ready = _condition("Ready", False, "PushFailed", result.message, generation)
        still = not result.terminal
        status["conditions"] = [
            ready,
            _condition("Reconciling", still, "Pushing" if still else "Finished", result.message, generation),
            _condition("Stalled", False, "Finished" if result.terminal else "Retrying", "", generation),
            attributed,
            _condition(
                "Pushed",
                pushed,
                "Pushed" if pushed else str(result.outcome),
                f"commit {result.sha}" if pushed else result.message,
                generation,
            ),
        ]
        return status
    if waiting_for:
        status["conditions"] = [
            _condition("Ready", False, "GitTargetUnavailable", waiting_for, generation),
            _condition("Reconciling", True, "WaitingForGitTarget", waiting_for, generation),
            _condition("Stalled", False, "Waiting", "", generation),
            attributed,
        ]
        return status
    if branch:
        status["branch"] = branch
    text = "on the log; the branch's commit worker closes the window when it reaches it"
    status["conditions"] = [
        _condition("Ready", False, REQUESTED, text, generation),
        _condition("Reconciling", True, REQUESTED, text, generation),
        _condition("Stalled", False, REQUESTED, "", generation),
        attributed,
    ]
    return status


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _path(ref: ObjectRef) -> str:
    return (
        f"/apis/{GROUP}/{VERSION}/namespaces/{ref.namespace}/{Kind.COMMIT_REQUEST.plural}/{ref.name}/status"
    )


class RequestStatusWriter:
    """Patches a CommitRequest's status when it changed; a status with a sha is final."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._written: dict[ObjectRef, dict[str, Any]] = {}

    def final(self, ref: ObjectRef, current: Mapping[str, Any]) -> bool:
        """Whether the object's status is terminal already (a later result must not replace it)."""
        status = self._written.get(ref, current)
        conditions = {c.get("type"): c for c in status.get("conditions", []) if isinstance(c, dict)}
        return bool(status.get("sha")) or (
            _finished(conditions) and conditions.get("Ready", {}).get("reason") != "Invalid"
        )

    async def write(self, ref: ObjectRef, wanted: dict[str, Any]) -> bool:
        """Patch `wanted` unless it is what was last written; returns whether it was patched."""
        previous = self._written.get(ref)
        if previous is not None and _without_times(previous) == wanted:
            return False
        before = {c["type"]: c for c in (previous or {}).get("conditions", [])}
        for condition in wanted.get("conditions", []):
            old = before.get(condition["type"])
            same = old is not None and old["status"] == condition["status"]
            condition["lastTransitionTime"] = (
                old["lastTransitionTime"] if old is not None and same else _now()
            )
        try:
            await self._client.send_json("PATCH", _path(ref), {"status": wanted}, content_type=_MERGE_PATCH)
        except KubeError as exc:
            if not exc.not_found:
                logger.warning("%s: writing status failed: %s", ref.describe(), exc)
            return False
        self._written[ref] = wanted
        return True

    def forget(self, present: Iterable[ObjectRef]) -> None:
        """Drop what it remembers of deleted objects."""
        keep = set(present)
        for gone in set(self._written) - keep:
            del self._written[gone]


def _without_times(status: dict[str, Any]) -> dict[str, Any]:
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions", [])
        ],
    }
