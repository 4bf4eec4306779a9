"""The chaos oracle: the workload's own record against the Git history, with no I/O.

For every file the history is a sequence of transitions (a commit that gave the file a new
version, or removed it). The oracle checks that every version a mutation produced appears as a
transition, unless a later version replaced it within the same commit window (a branch's window
collects one person's writes until `window_s` of silence or another person's write, and commits
only the latest of each file); that no version appears twice; that each transition's author is
the person whose mutation produced it (misattributed and unknown counted apart); and measures the
time from the mutation's response to the push that put its commit on the remote.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.chaos.workload import Mutation

__all__ = ["UNKNOWN_AUTHOR", "Transition", "Verdict", "judge", "percentile"]

UNKNOWN_AUTHOR = "unknown (attribution unresolved)"
# How much later than the response a watch event may reach the commit worker's window: a window
# stays open for its silence after the last write it saw, not after the last response.
WINDOW_JITTER_S = 1.0


@dataclass(frozen=True, slots=True)
class Transition:
    """One commit's change to one file: its new version (None: removed)."""

    branch: str
    path: str
    fingerprint: str | None
    sha: str
    author: str
    pushed_at: float | None  # monotonic time of the first push that carried the commit


@dataclass
class Verdict:
    lost: list[Mutation] = field(default_factory=list)
    duplicated: list[Transition] = field(default_factory=list)
    misattributed: list[tuple[Mutation, Transition]] = field(default_factory=list)
    unknown: list[tuple[Mutation, Transition]] = field(default_factory=list)
    phantom: list[Transition] = field(default_factory=list)  # a version no recorded mutation made
    merged: int = 0  # versions replaced by the same person inside one commit window
    latencies_s: list[float] = field(default_factory=list)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by the inclusive method; NaN for no values."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _windows(mutations: Sequence[Mutation], window_s: float) -> dict[int, int]:
    """Mutation seq to the commit window it can share: one per branch per run of one person's
    mutations, each within `window_s` (plus pipeline jitter) of the previous one."""
    window_of: dict[int, int] = {}
    last: dict[str, Mutation] = {}
    number = 0
    for mutation in sorted(mutations, key=lambda m: m.at):
        previous = last.get(mutation.branch)
        if (
            previous is None
            or previous.user != mutation.user
            or mutation.at - previous.at > window_s + WINDOW_JITTER_S
        ):
            number += 1
            window_of[mutation.seq] = number
        else:
            window_of[mutation.seq] = window_of[previous.seq]
        last[mutation.branch] = mutation
    return window_of


def judge(mutations: Sequence[Mutation], transitions: Sequence[Transition], window_s: float) -> Verdict:
    verdict = Verdict()
    by_version: dict[tuple[str, str, str | None], list[Transition]] = defaultdict(list)
    for transition in transitions:
        by_version[(transition.branch, transition.path, transition.fingerprint)].append(transition)
    for found in by_version.values():
        verdict.duplicated.extend(found[1:])
    windows = _windows(mutations, window_s)
    per_file: dict[tuple[str, str], list[Mutation]] = defaultdict(list)
    for mutation in sorted(mutations, key=lambda m: m.at):
        per_file[(mutation.branch, mutation.path)].append(mutation)
    made: set[tuple[str, str, str | None]] = set()
    for (branch, path), sequence in per_file.items():
        for index, mutation in enumerate(sequence):
            key = (branch, path, mutation.fingerprint)
            made.add(key)
            committed = by_version.get(key)
            if not committed:
                following = sequence[index + 1] if index + 1 < len(sequence) else None
                if following is not None and windows[following.seq] == windows[mutation.seq]:
                    verdict.merged += 1
                else:
                    verdict.lost.append(mutation)
                continue
            first = committed[0]
            if first.author == mutation.user:
                pass
            elif first.author == UNKNOWN_AUTHOR:
                verdict.unknown.append((mutation, first))
            else:
                verdict.misattributed.append((mutation, first))
            if first.pushed_at is not None:
                verdict.latencies_s.append(first.pushed_at - mutation.at)
    verdict.phantom = [t for key, found in by_version.items() if key not in made for t in found[:1]]
    return verdict
