"""Late authors: a git note (and the object-state record) naming who made an unresolved change.

A `LateAuthor` work record says that a change the branch committed as `unknown (attribution
unresolved)` was made by somebody after all (a fact that arrived after the hold). The pushed
history is never rewritten: the author goes into a note on the commit that carries the change,
in the notes ref of the branch, `refs/notes/reverser-authors/<branch>`, pushed to the same remote
(`git log --notes=reverser-authors/main` shows it), and into the object's `<prefix>.object-state`
record when that version is still current.

One ref per branch because the branch's partition owner is its only writer: no two processes ever
race on one notes ref, so a push needs no notes merge, only a lease on the tip it fetched (a new
owner after a failover fetches the ref first). The note itself is idempotent: one line per
(path, resourceVersion), and a line already there is not written again, so a redelivered or
replayed record (at-least-once delivery from the router, a replay of branch-work) changes nothing.

The commit is found by the work offset the record carries: the oldest commit on the pushed
first-parent history whose `Reverser-Offset` trailer (this FIFO's) is at or after it, provided that
commit changed the file (a write that changed nothing has no commit to note).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import yaml

from pipeline.codec.branch_work import LateAuthor, WorkItem
from pipeline.codec.object_state import ObjectState
from pipeline.commit import metrics
from pipeline.commit.git.repo import GitRemoteError, LocalRepo, PushRejected, identity_line
from pipeline.commit.git.tree import GitTree
from pipeline.commit.identity import Identity, author_identity
from pipeline.commit.layout import LayoutError, canonical_path, normalize_target_path
from pipeline.commit.messages import trusted_offset
from pipeline.commit.statebook import StateBook
from pipeline.log.api import PendingRecord
from pipeline.msgtemplate import clean_line

__all__ = [
    "LATE_AUTHOR_PREFIX",
    "NOTES_REF_PREFIX",
    "LateAuthors",
    "containing_commit",
    "late_line",
    "noted",
    "notes_ref",
    "parse_late_lines",
]

logger = logging.getLogger(__name__)

NOTES_REF_PREFIX: Final = "refs/notes/reverser-authors/"
LATE_AUTHOR_PREFIX: Final = "Reverser-Late-Author: "
# First-parent commits walked back from the remote tip to find the one carrying a work offset.
SCAN_COMMITS: Final = 10_000
PUSH_ATTEMPTS: Final = 3
_LINE = re.compile(
    r"^Reverser-Late-Author: (?P<path>\S+)@(?P<rv>\S+): (?P<name>.*) <(?P<email>[^>]*)>"
    r" \(username (?P<username>.*); tier (?P<tier>\S+); (?P<delay>[0-9.]+) s late\)$"
)

Offset = tuple[int, int]


def notes_ref(branch: str) -> str:
    """The notes ref of one branch: its partition owner is the only writer."""
    return NOTES_REF_PREFIX + branch


def late_line(path: str, late: LateAuthor, identity: Identity, delay_s: float) -> str:
    """The note line for one late author: the file and version, who, how found and how late.

    The name and email are the commit author the change would have had, so a tool compares the
    note with commit authors as it would compare two commits.
    """
    who = f"{clean_line(identity.name)} <{clean_line(identity.email)}>"
    author = late.author
    how = f"username {clean_line(author.username)}; tier {clean_line(author.tier)}; {delay_s:.1f} s late"
    return f"{LATE_AUTHOR_PREFIX}{clean_line(path)}@{clean_line(late.resource_version)}: {who} ({how})"


def _key(line: str) -> str:
    """`<path>@<resourceVersion>:` — which change a line is about (one author per change)."""
    return line.split(": ", 2)[1] if line.startswith(LATE_AUTHOR_PREFIX) else line


def noted(existing: str, line: str) -> str | None:
    """The note with `line` added, or None when it already names an author for that change."""
    lines = [x for x in existing.splitlines() if x.strip()]
    if any(_key(x) == _key(line) for x in lines):
        return None
    return "\n".join([*lines, line]) + "\n"


@dataclass(frozen=True, slots=True)
class NotedAuthor:
    """One parsed note line (`reverser resolve`, the chaos oracle and the tests read notes back)."""

    path: str
    resource_version: str
    name: str
    email: str
    username: str
    tier: str
    delay_s: float


def parse_late_lines(note: str) -> list[NotedAuthor]:
    """The late authors a note names (lines it does not recognise are skipped)."""
    found = []
    for line in note.splitlines():
        match = _LINE.match(line.strip())
        if match is not None:
            found.append(
                NotedAuthor(
                    match["path"],
                    match["rv"],
                    match["name"],
                    match["email"],
                    match["username"],
                    match["tier"],
                    float(match["delay"]),
                )
            )
    return found


def containing_commit(history: Iterable[tuple[str, Offset | None]], at: Offset) -> str | None:
    """The commit that applied work offset `at`, from (sha, trusted offset) pairs newest first.

    It is the oldest commit whose offset on `at`'s partition is at or after `at`; the walk stops at
    the first commit before it. None when no commit reached it.
    """
    found = None
    for sha, offset in history:
        if offset is None or offset[0] != at[0]:
            continue
        if offset[1] < at[1]:
            break
        found = sha
    return found


@dataclass(slots=True)
class _Waiting:
    item: WorkItem
    late: LateAuthor


class LateAuthors:
    """The late authors of one branch waiting to be noted and pushed, in log order."""

    def __init__(self, repo: LocalRepo, provider: str, branch: str, committer: Identity) -> None:
        self._repo = repo
        self._provider = provider
        self._branch = branch
        self._committer = committer
        self._ref = notes_ref(branch)
        self._waiting: list[_Waiting] = []

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    def add(self, item: WorkItem, late: LateAuthor) -> None:
        self._waiting.append(_Waiting(item, late))

    def _history(self, tip: str | None) -> Iterable[tuple[str, Offset | None]]:
        own = identity_line(self._committer)
        sha = tip
        for _ in range(SCAN_COMMITS):
            if sha is None:
                return
            info = self._repo.read_commit(sha)
            found, _why = trusted_offset(
                info.trailers(), info.committer, own, self._provider, self._branch, None
            )
            yield sha, found
            sha = info.parents[0] if info.parents else None

    async def flush(
        self,
        tip: str | None,
        tree: GitTree,
        book: StateBook | None,
        sealed: Callable[[WorkItem], bool],
        wall_ms: int,
    ) -> tuple[list[Offset], list[PendingRecord]]:
        """Note every waiting late author on the pushed history `tip` (whose files are `tree`) and
        push the notes ref; `sealed` says whether an item's type is committed sealed.

        Returns the work offsets now settled and the object-state records to write. Raises
        `GitRemoteError` when the remote cannot be reached (everything keeps waiting).
        """
        if not self._waiting:
            return [], []
        history = list(self._history(tip))
        for _ in range(PUSH_ATTEMPTS):
            expected = await self._repo.fetch_notes(self._ref)
            changed = False
            for waiting in self._waiting:
                changed = await self._note(waiting, history) or changed
            if not changed:
                break
            try:
                await self._repo.push_notes(self._ref, expected)
                break
            except PushRejected as exc:
                logger.info("%s; fetching the notes again", exc)
        else:
            raise GitRemoteError(f"{self._ref} still rejected after {PUSH_ATTEMPTS} attempts")
        done, self._waiting = self._waiting, []
        states = [r for w in done if (r := self._state(w, tree, book, sealed(w.item), wall_ms)) is not None]
        return [(w.item.partition, w.item.offset) for w in done], states

    def _path(self, item: WorkItem, late: LateAuthor) -> str | None:
        try:
            folder = normalize_target_path(item.path)
            return canonical_path(folder, item.stream.group, item.stream.resource, late.namespace, late.name)
        except LayoutError:
            return None

    async def _note(self, waiting: _Waiting, history: Sequence[tuple[str, Offset | None]]) -> bool:
        """Write the note line for one late author locally; whether the notes ref changed."""
        item, late = waiting.item, waiting.late
        path = self._path(item, late)
        sha = containing_commit(history, (late.work_partition, late.work_offset))
        if path is None or sha is None or await self._repo.last_commit_touching(sha, path) != sha:
            metrics.LATE_NOTES.labels(self._provider, self._branch, metrics.LateNoteResult.NO_COMMIT).inc()
            logger.warning(
                "%s %s: no pushed commit carries %s@%s (work %d:%d); its late author %s is not noted",
                self._provider,
                self._branch,
                path,
                late.resource_version,
                late.work_partition,
                late.work_offset,
                late.author.username,
            )
            return False
        author = late.author
        identity = author_identity(
            author.outcome, author.username, author.display_name, author.email, self._committer
        )
        delay_s = max(late.resolved_at_ms - item.observed_at_ms, 0) / 1000
        text = noted(await self._repo.read_note(self._ref, sha), late_line(path, late, identity, delay_s))
        if text is None:
            metrics.LATE_NOTES.labels(self._provider, self._branch, metrics.LateNoteResult.ALREADY).inc()
            return False
        await self._repo.write_note(self._ref, sha, text, self._committer)
        metrics.LATE_NOTES.labels(self._provider, self._branch, metrics.LateNoteResult.NOTED).inc()
        metrics.LATE_DELAY_SECONDS.labels(self._provider, self._branch).observe(delay_s)
        return True

    def _state(
        self, waiting: _Waiting, tree: GitTree, book: StateBook | None, sealed: bool, wall_ms: int
    ) -> PendingRecord | None:
        """The object-state record naming the late author, when the version is still current.

        The content is read back from the pushed file (the object as committed), so the record
        differs from the one before only in its author and position.
        """
        item, late = waiting.item, waiting.late
        path = self._path(item, late)
        blob = None if path is None else tree.get(path)
        if book is None or blob is None:
            return None
        document = self._repo.objects.read(blob)
        if sealed:
            # a sealed type's state holds the committed (sealed) document as its content
            content, document = document, b""
        else:
            try:
                content = json.dumps(yaml.safe_load(document), separators=(",", ":")).encode()
            except yaml.YAMLError:
                return None
        state = ObjectState(
            target=item.stream.target,
            provider=self._provider,
            branch=self._branch,
            path=item.path,
            cluster=item.stream.cluster,
            group=item.stream.group,
            version=item.stream.version,
            resource=item.stream.resource,
            namespace=late.namespace,
            name=late.name,
            uid=late.uid,
            resource_version=late.resource_version,
            object_json=content,
            sealed=sealed,
            document=document,
            author=late.author,
            partition=item.partition,
            offset=item.offset,
            committed_at_ms=wall_ms,
        )
        return book.reauthor(state)
