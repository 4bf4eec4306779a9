"""What each target's results say about changes the in-place writer refused (GitTarget `Stalled`).

A refused change writes nothing and its records wait on the dead-letter topic until the user fixes
the folder or the rule; the GitTarget shows it as `Stalled`, with the reason and the file. The
branch worker reports that on the target's result record (`pipeline.codec.target_result`), which
is compacted to the newest per target, so every result it writes for a target carries the
target's refusal until a later change of the target commits: a push report never clears a refusal
by leaving it out, and a refusal never hides the last push.

Pure bookkeeping: the branch worker tells it what it refused, committed and reported.
"""

from __future__ import annotations

import dataclasses

from pipeline.codec.target_result import PushOutcome, TargetRefusal, TargetResult
from pipeline.commit.plan import Refused
from pipeline.intent.homes import FolderIndex

__all__ = ["TargetRefusals", "refusal_of"]


def refusal_of(refused: Refused, folder: FolderIndex | None, at_ms: int) -> TargetRefusal:
    """The reported form of a refusal: the file it names (else the object's one home file, else
    the canonical path the change was for) and the object, never the detail, which may quote the
    file."""
    key = refused.change.key
    file = refused.refusal.path
    if not file and folder is not None:
        homes = folder.index.candidates(key)
        file = homes[0].path if homes else ""
    return TargetRefusal(
        reason=str(refused.refusal.reason),
        file=file or refused.path,
        object=f"{key.kind} {key.namespace}/{key.name}" if key.namespace else f"{key.kind} {key.name}",
        at_ms=at_ms,
    )


class TargetRefusals:
    """Per target of one branch: its newest refusal still standing, and the last result reported."""

    __slots__ = ("_refusals", "_reported")

    def __init__(self) -> None:
        self._refusals: dict[str, TargetRefusal] = {}
        self._reported: dict[str, TargetResult] = {}

    def committed(self, target: str) -> None:
        """A change of `target` committed: its folder takes writes again, the refusal is cleared
        from the next result reported."""
        self._refusals.pop(target, None)

    def refused(self, target: str, provider: str, branch: str, refusal: TargetRefusal) -> TargetResult:
        """`target` refused a change: the result to report now, the last one with the refusal
        (`PushOutcome.NONE` when nothing of the target was reported yet)."""
        self._refusals[target] = refusal
        last = self._reported.get(target)
        if last is None:
            last = TargetResult(target, provider, branch, "", PushOutcome.NONE, refusal.at_ms)
        return self.reported(last)

    def reported(self, result: TargetResult) -> TargetResult:
        """`result` as it is reported: with the target's standing refusal (or none)."""
        result = dataclasses.replace(result, refusal=self._refusals.get(result.target))
        self._reported[result.target] = result
        return result
