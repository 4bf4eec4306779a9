"""CommitRequests on a branch: close the target's open window now, under the request's message.

gitops-reverser's CommitRequest is a one-shot "save now": it finalizes the open commit window of
its GitTarget instead of waiting for the silence timer, optionally `closeDelaySeconds` later (the
author's changes made meanwhile still join the window), and the commit it produced is reported in
the request's status. Here the configuration controller appends a `CommitRequested` record to the
target's branch-work partition, so the branch's FIFO meets it in log order, after every change
routed before it. This module holds what the FIFO decides about such a record (pure, tested
without Git or a log) and the results it reports; `BranchWorker` only dispatches to it.

Why a record on the branch's own partition and not a call to whichever replica owns the branch:
the log's order is the only order all replicas agree on, a redelivery repeats the same decision,
and the commit's `Reverser-Offset` trailer covers the request's offset, so a replayed request is
recognised as already committed and never makes a second commit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from enum import StrEnum

from pipeline.codec.branch_work import CommitRequested, WorkItem
from pipeline.codec.commit_request_result import RequestOutcome, RequestResult
from pipeline.commit.commits import CommitInfo
from pipeline.commit.messages import parse_offset
from pipeline.commit.position import LogPosition
from pipeline.commit.window import CommitWindow
from pipeline.config import CommitMessageSettings

__all__ = [
    "FlushAction",
    "RequestDesk",
    "attach",
    "carrying_commit",
    "decide",
    "nothing_to_commit",
    "request_results",
    "request_template",
    "why_nothing",
]

logger = logging.getLogger(__name__)

#: How many commits back a redelivered request looks for the commit that carried it.
CARRIER_SCAN_COMMITS = 1_000


class FlushAction(StrEnum):
    """What a `CommitRequested` record does to the branch's open window."""

    CLOSE_NOW = "close_now"
    CLOSE_LATER = "close_later"
    NOTHING = "nothing"


def decide(window: CommitWindow | None, target: str, close_delay_s: int) -> FlushAction:
    """Close the open window when it collects the request's target: at once, or after the delay.

    A window of another target (or none) is left alone: the request finds nothing of its target to
    commit, as gitops-reverser resolves a request without an open window ("nothing to save"). The
    window's author is not compared with the requester: the controller names the submitter only in
    the request's `AuthorAttributed` condition (the record carries no actor), and the commit is
    authored by the window's own author whatever the request says.
    """
    if window is None or window.target != target:
        return FlushAction.NOTHING
    return FlushAction.CLOSE_NOW if close_delay_s <= 0 else FlushAction.CLOSE_LATER


def attach(window: CommitWindow, item: WorkItem, body: CommitRequested, now: float) -> None:
    """Bind the request to the window: its offset settles with the window's commit (whose trailer
    then claims it), and with a delay the window closes at the latest `closeDelaySeconds` from now
    on the clock and from the record's time in event time (how a backlog replays it)."""
    window.requests.append(body)
    window.offsets.append((item.partition, item.offset))
    if body.close_delay_s > 0:
        close_at = now + body.close_delay_s
        window.close_at = close_at if window.close_at is None else min(window.close_at, close_at)
        close_at_ms = item.observed_at_ms + body.close_delay_s * 1000 if item.observed_at_ms else 0
        if close_at_ms and (not window.close_at_ms or close_at_ms < window.close_at_ms):
            window.close_at_ms = close_at_ms
        window.deadline = min(window.deadline, window.close_at)


def request_template(window: CommitWindow) -> CommitMessageSettings | None:
    """The message of the window's first request that has one, as a template of literal text.

    gitops-reverser uses `spec.message` verbatim; here it becomes the subject (its first line) and
    body (the rest) of the commit with every `$` escaped, so template-like text stays literal and
    the one line cleaner of every message applies (a line cannot pose as a trailer; the worker's
    `Reverser-*` trailers follow as always). None: the window's usual message.
    """
    message = next((r.message for r in window.requests if r.message.strip()), "")
    if not message:
        return None
    subject, _, body = message.replace("\r", "").strip("\n").partition("\n")
    return CommitMessageSettings(subject=subject.replace("$", "$$"), body=body.strip("\n").replace("$", "$$"))


def why_nothing(window: CommitWindow | None) -> str:
    """Why a request found nothing to commit, in words for its status."""
    if window is None:
        return "no commit window of the target was open"
    return f"the open commit window belongs to target {window.target}"


#: Why a request whose window was committed found nothing: the window changed nothing in Git.
UNCHANGED = "the commit window changed nothing in Git"


def nothing_to_commit(
    body: CommitRequested, target: str, provider: str, branch: str, why: str, at_ms: int
) -> RequestResult:
    """The result of a request that found no open window of its target (or one that changed nothing)."""
    return RequestResult(
        body.namespace,
        body.name,
        body.uid,
        target,
        provider,
        branch,
        RequestOutcome.NOTHING_TO_COMMIT,
        "",
        at_ms,
        why,
    )


def request_results(
    carried: Iterable[tuple[str, str, Iterable[CommitRequested]]],
    provider: str,
    branch: str,
    pushed: bool,
    at_ms: int,
    message: str,
) -> list[RequestResult]:
    """One result per request of the given (target, sha, requests) commits after a push attempt."""
    outcome = RequestOutcome.COMMITTED if pushed else RequestOutcome.PUSH_FAILED
    return [
        RequestResult(r.namespace, r.name, r.uid, target, provider, branch, outcome, sha, at_ms, message)
        for target, sha, requests in carried
        for r in requests
    ]


def carrying_commit(commits: Iterable[CommitInfo], at: LogPosition) -> str | None:
    """The commit whose trailer first claims the record `at`, walking first parents from the tip.

    A redelivered request is skipped because the branch already carries it; its result (lost when
    the process died between the push and the report) is the oldest commit of this FIFO whose
    `Reverser-Offset` on that partition is at or past the request's offset.
    """
    found: str | None = None
    for info in commits:
        claimed = parse_offset(info.trailers(), at.provider, at.branch)
        if claimed is None or claimed[0] != at.partition:
            continue
        if claimed[1] < at.offset:
            break
        found = info.sha
    return found


def first_parents(read: Callable[[str], CommitInfo], tip: str) -> Iterator[CommitInfo]:
    """The branch's commits from `tip` along first parents, at most `CARRIER_SCAN_COMMITS`."""
    sha: str | None = tip
    for _ in range(CARRIER_SCAN_COMMITS):
        if sha is None:
            return
        info = read(sha)
        yield info
        sha = info.parents[0] if info.parents else None


Tell = Callable[[RequestResult], Awaitable[None]]
#: (target, sha, requests) of one commit
Carried = tuple[str, str, Iterable[CommitRequested]]


class RequestDesk:
    """The branch worker's CommitRequest side: decides, attaches and reports; the worker commits.

    `tell` puts a result on the log (the worker's target-result path); `clock` is the worker's
    monotonic clock (window deadlines), `wall` the time results carry.
    """

    def __init__(
        self, provider: str, branch: str, tell: Tell, clock: Callable[[], float], wall: Callable[[], float]
    ) -> None:
        self._provider = provider
        self._branch = branch
        self._tell = tell
        self._clock = clock
        self._wall = wall

    def _now_ms(self) -> int:
        return int(self._wall() * 1000)

    async def take(self, window: CommitWindow | None, item: WorkItem, body: CommitRequested) -> FlushAction:
        """Apply `decide`: attach the request to the window, or report that it found nothing.

        The caller commits the window on `CLOSE_NOW` and settles the record on `NOTHING`.
        """
        action = decide(window, item.stream.target, body.close_delay_s)
        logger.info(
            "%s %s: CommitRequest %s/%s for target %s: %s",
            self._provider,
            self._branch,
            body.namespace,
            body.name,
            item.stream.target,
            action,
        )
        if action is FlushAction.NOTHING:
            why = why_nothing(window)
            await self._tell(
                nothing_to_commit(body, item.stream.target, self._provider, self._branch, why, self._now_ms())
            )
        else:
            assert window is not None
            attach(window, item, body, self._clock())
        return action

    async def unchanged(self, target: str, requests: Iterable[CommitRequested]) -> None:
        """The requests of a window that made no commit (its writes were already in Git)."""
        for body in requests:
            await self._tell(
                nothing_to_commit(body, target, self._provider, self._branch, UNCHANGED, self._now_ms())
            )

    async def pushed(
        self, carried: Iterable[tuple[str, str, Iterable[CommitRequested]]], ok: bool, message: str
    ) -> None:
        """The requests of the commits a push attempt carried: committed, or the push failed."""
        for result in request_results(carried, self._provider, self._branch, ok, self._now_ms(), message):
            await self._tell(result)

    async def redelivered(self, commits: Iterable[CommitInfo], item: WorkItem, body: CommitRequested) -> None:
        """A request the branch already carries: report its commit again, in case the process died
        between the push and the report (a second report of the same sha changes no status)."""
        sha = carrying_commit(commits, LogPosition(self._provider, self._branch, item.partition, item.offset))
        if sha is not None:
            await self.pushed([(item.stream.target, sha, [body])], True, "")
