"""The chaos oracle: the workload's own record against the Git history, with no I/O.

For every file the history is a sequence of transitions (a commit that gave the file a new
version, or removed it). The oracle checks that every version a mutation produced appears as a
transition, unless a later version replaced it within the same commit window (a branch's window
collects one person's writes until `window_s` of silence or another person's write, and commits
only the latest of each file; see `_mergeable` for what the oracle can know of that order), or it
removed a file no commit had shown; that no version appears twice; that each transition's author is
the person whose mutation produced it (misattributed and unknown counted apart; an unknown commit
whose git note names the right person later is `late`, named: the note is where users and tools
find the author, and one naming somebody else is misattributed); and measures the
time from the mutation's response to the push that put its commit on the remote.

With admission facts instead of audit (`check_facts`), an unknown author is a failure only when
the facts topic holds a fact for that change: with `failurePolicy: Ignore` a write the webhook did
not get through for has no fact at all, and nothing could name it. Every named change must have
its fact found too, or the check itself cannot be trusted.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.content.scale import is_scale_key
from tests.chaos.workload import Mutation

__all__ = [
    "UNKNOWN_AUTHOR",
    "FactCheck",
    "SeenFact",
    "Transition",
    "Verdict",
    "check_facts",
    "judge",
    "percentile",
]

UNKNOWN_AUTHOR = "unknown (attribution unresolved)"
# A scale's fact names the version by the Deployment's resourceVersion before the write and the new
# replica count (pipeline.content.scale), neither of which the Git history shows: it ties to a scale
# by its replica count and in time, like a name-only fact (a scale's from an older pipeline): its review
# arrived before the response (by at most the webhook's timeout and the request), or after it when
# the replica holding the review was paused or cut off (by at most the longest such fault).
NAME_FACT_BEFORE_S = 15.0
NAME_FACT_AFTER_S = 40.0
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
    # who a late fact named for this file in this commit (its git note), when the author is unknown
    late_author: str | None = None


@dataclass
class Verdict:
    lost: list[Mutation] = field(default_factory=list)
    duplicated: list[Transition] = field(default_factory=list)
    misattributed: list[tuple[Mutation, Transition]] = field(default_factory=list)
    unknown: list[tuple[Mutation, Transition]] = field(default_factory=list)
    phantom: list[Transition] = field(default_factory=list)  # a version no recorded mutation made
    merged: int = 0  # versions replaced by the same person inside one commit window
    # committed as unknown, then named right by a late fact (the commit's git note): named, not unknown
    late: list[tuple[Mutation, Transition]] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    # committed under the right author
    named: list[tuple[Mutation, Transition]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SeenFact:
    """One fact the facts topic held at the end of the run, as much of it as ties it to a change."""

    author: str
    verb: str
    resource: str  # "configmaps", "deployments"
    namespace: str
    name: str
    content_key: str  # its content or scale key; "" where it names no version (a delete)
    stage_s: float  # when its review arrived, on the workload's clock (time.monotonic())


@dataclass
class FactCheck:
    """The unknown and named changes of a run with admission facts, against the facts on the log."""

    # unknown, and no fact on the log names the change: the webhook was not answered for it
    factless: list[tuple[Mutation, Transition]] = field(default_factory=list)
    # unknown although a fact names the change: the pipeline had what it needed (a failure)
    unused: list[tuple[Mutation, Transition]] = field(default_factory=list)
    # named right, yet no fact found for it: the check cannot tell a fact when it sees one (a failure)
    unmatched: list[tuple[Mutation, Transition]] = field(default_factory=list)
    named: int = 0  # named right, by the commit or late by its note
    changes: int = 0  # committed changes of one writer each (all the workload makes)

    @property
    def named_pct(self) -> float:
        return 100.0 * self.named / self.changes if self.changes else 100.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by the inclusive method; NaN for no values."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _stream(mutation: Mutation) -> tuple[str, str]:
    """The watch stream a mutation's event comes on: one per namespace and kind, i.e. per directory
    of a branch. Events of one stream keep their order through the pipeline; events of two
    streams may reach a branch's commit worker in either order."""
    return mutation.branch, mutation.path.rsplit("/", 1)[0]


def _mergeable(earlier: Mutation, later: Mutation, on_branch: Sequence[Mutation], window_s: float) -> bool:
    """Whether `later` may have replaced `earlier` (same file) inside one commit window.

    A window collects one person's writes on a branch while each comes within `window_s` (plus
    delivery jitter) of the previous one, and ends at another person's write. Only another
    person's write on the same watch stream is certainly seen between the two: one on another
    stream may reach the worker before or after them, so it does not decide. And only if it was
    certainly stored between them: sent after `earlier` was answered and answered before `later`
    was sent. Two requests in flight at once may be stored in either order, whatever order their
    responses came back in (found by seed 11: a response 0.18 ms after the create's).
    """
    if later.user != earlier.user:
        return False
    previous_at = earlier.at
    for mutation in on_branch:
        if not earlier.at < mutation.at <= later.at:
            continue
        if mutation.user == earlier.user:
            if mutation.at - previous_at > window_s + WINDOW_JITTER_S:
                return False
            previous_at = mutation.at
        elif (
            _stream(mutation) == _stream(earlier)
            and earlier.at <= mutation.started
            and mutation.at <= later.started
        ):
            return False
    return True


def judge(mutations: Sequence[Mutation], transitions: Sequence[Transition], window_s: float) -> Verdict:
    verdict = Verdict()
    by_version: dict[tuple[str, str, str | None], list[Transition]] = defaultdict(list)
    for transition in transitions:
        by_version[(transition.branch, transition.path, transition.fingerprint)].append(transition)
    for found in by_version.values():
        verdict.duplicated.extend(found[1:])
    per_file: dict[tuple[str, str], list[Mutation]] = defaultdict(list)
    per_branch: dict[str, list[Mutation]] = defaultdict(list)
    for mutation in sorted(mutations, key=lambda m: m.at):
        per_file[(mutation.branch, mutation.path)].append(mutation)
        per_branch[mutation.branch].append(mutation)
    made: set[tuple[str, str, str | None]] = set()
    for (branch, path), sequence in per_file.items():
        shown = False  # whether a commit has shown the file so far
        for index, mutation in enumerate(sequence):
            key = (branch, path, mutation.fingerprint)
            made.add(key)
            committed = by_version.get(key)
            if not committed:
                following = sequence[index + 1] if index + 1 < len(sequence) else None
                if following is not None and _mergeable(mutation, following, per_branch[branch], window_s):
                    verdict.merged += 1
                elif mutation.fingerprint is None and not shown:
                    # Removing a file no commit ever showed (its creation was merged into this
                    # removal) changes nothing in Git: nothing to commit, nothing lost.
                    verdict.merged += 1
                else:
                    verdict.lost.append(mutation)
                continue
            shown = mutation.fingerprint is not None
            first = committed[0]
            if first.author == mutation.user:
                verdict.named.append((mutation, first))
            elif first.author == UNKNOWN_AUTHOR and first.late_author == mutation.user:
                verdict.late.append((mutation, first))
            elif first.author == UNKNOWN_AUTHOR and first.late_author is None:
                verdict.unknown.append((mutation, first))
            else:
                verdict.misattributed.append((mutation, first))
            if first.pushed_at is not None:
                verdict.latencies_s.append(first.pushed_at - mutation.at)
    verdict.phantom = [t for key, found in by_version.items() if key not in made for t in found[:1]]
    return verdict


def _object_of(path: str) -> tuple[str, str, str]:
    """(resource, namespace, name) of a mirrored file `<target path>/<ns>/<dir>/<name>.yaml`."""
    *head, directory, leaf = path.removesuffix(".yaml").split("/")
    namespace = head[-2] if directory == "deployments" else head[-1]
    return directory, namespace, leaf


def _wanted(mutation: Mutation, version_key: str) -> tuple[str, ...]:
    """What a fact for `mutation` looks like: a delete fact, a name-only fact for a scale (a Scale is
    not the object), or a fact naming the version it wrote by its content key."""
    resource, namespace, name = _object_of(mutation.path)
    if mutation.fingerprint is None:
        return ("delete", mutation.user, resource, namespace, name)
    if mutation.op == "scale":
        return ("scale", mutation.user, resource, namespace, name, mutation.fingerprint.rsplit("/", 1)[-1])
    return ("content", mutation.user, resource, namespace, name, version_key)


def _offered(fact: SeenFact) -> tuple[str, ...]:
    where = (fact.author, fact.resource, fact.namespace, fact.name)
    if fact.verb == "delete":
        return ("delete", *where)
    if not fact.content_key:
        return ("name", *where)
    if is_scale_key(fact.content_key):
        return ("scale", *where, fact.content_key.rsplit(":", 1)[-1])
    return ("content", *where, fact.content_key)


def check_facts(verdict: Verdict, version_keys: Mapping[str, str], facts: Iterable[SeenFact]) -> FactCheck:
    """Sort the verdict's unknown changes by whether a fact for them reached the log.

    `version_keys` maps a commit sha and path (`f"{sha}:{path}"`) to the content key of the file
    that commit wrote, for the transitions of named and unknown changes.
    """
    offered: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for fact in facts:
        offered[_offered(fact)].append(fact.stage_s)
    check = FactCheck()

    def found(mutation: Mutation, transition: Transition) -> bool:
        wanted = _wanted(mutation, version_keys.get(f"{transition.sha}:{transition.path}", ""))
        if wanted[0] != "scale":
            return wanted in offered
        # one user may scale one Deployment more than once: only a review of about that time counts
        earliest, latest = mutation.at - NAME_FACT_BEFORE_S, mutation.at + NAME_FACT_AFTER_S
        by_name = ("name", *wanted[1:-1])
        return any(earliest <= at <= latest for at in [*offered.get(wanted, []), *offered.get(by_name, [])])

    for mutation, transition in [*verdict.named, *verdict.late]:
        check.named += 1
        if not found(mutation, transition):
            check.unmatched.append((mutation, transition))
    for mutation, transition in verdict.unknown:
        (check.unused if found(mutation, transition) else check.factless).append((mutation, transition))
    check.changes = check.named + len(verdict.unknown) + len(verdict.misattributed)
    return check
