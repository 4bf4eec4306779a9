"""What one branch does with each piece of branch work, decided without Git or a log.

`Decider` holds a branch's state that decisions read: the configured targets and their rules, the
version ledger ("never backwards"), the object-state book, the open commit window and the
snapshots in progress. Given a work item and a view of the branch's tree it answers with a plan
(a commit to make), a skip (settle without a commit, counted and logged by why), a reject (park
the record as a dead letter) or object-state records. `BranchWorker` is the shell around it: it
fetches, commits, pushes, replays and reports, and asks the decider at every step in log order.

Decisions about the tree take it as an argument (`Files`), read at the moment of the decision,
so a window committed just before a snapshot is visible to the snapshot's plan. The one question
that needs Git (did this pipeline write a file the ledger does not know?) is asked by the shell
between `absent_candidates` and `absent_plans`. Where a change lands in a folder people keep is
decided when its window is committed (`pipeline.commit.inplace`); the decider records the change
(the object before and after) beside the canonical write, and keeps the objects of files edited
in place for their next change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol, Unpack

from pipeline.codec.branch_work import (
    NOT_ATTEMPTED,
    Outcome,
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    ResyncObject,
    TargetDeleted,
    WorkAuthor,
    WorkItem,
    Write,
)
from pipeline.codec.object_state import ObjectKey, ObjectState
from pipeline.commit import flush
from pipeline.commit.identity import (
    COMMITTER_KIND,
    UNRESOLVED,
    UNRESOLVED_KIND,
    Identity,
    author_identity,
    author_kind,
    committer_identity,
)
from pipeline.commit.inplace import (
    Homes,
    LastSeen,
    LiveChange,
    indexed,
    kind_of,
    live_object,
    placed_object,
    remembered,
    sealed_object,
    unlisted_homes,
)
from pipeline.commit.layout import LayoutError, canonical_path, is_sensitive, normalize_target_path, object_of
from pipeline.commit.messages import ChangedObject
from pipeline.commit.metrics import SkipReason
from pipeline.commit.plan import (
    Byline,
    Files,
    Plan,
    PlanKind,
    PlanParts,
    Retired,
    Sweep,
    Writes,
    documents,
    orphans,
)
from pipeline.commit.position import LogPosition, Offset
from pipeline.commit.snapshots import Carried, Collected, Complete, SnapshotBook
from pipeline.commit.statebook import StateBook
from pipeline.commit.versions import VersionLedger
from pipeline.commit.window import CloseReason, CommitWindow, event_time_ms, window_limits_s
from pipeline.commit.yamlrender import RenderError, parse_object_json, render_object
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.intent.homes import ObjectKey as HomeKey
from pipeline.kube.selector import SelectorError
from pipeline.log.api import PendingRecord
from pipeline.models import GroupResource
from pipeline.operation import Operation
from pipeline.prune import Prune
from pipeline.sealing import PlaintextFieldError, SealedDocument, SealedDocumentError, sensitive_set
from pipeline.slices import Steps
from pipeline.targetrules import ALL_OPERATIONS, TargetRules

__all__ = [
    "SNAPSHOT_AUTHOR",
    "Closed",
    "Decider",
    "Reject",
    "Skip",
    "Staged",
    "rebuild_plan",
]


class Live(Protocol):
    """An object as a record carries it: a `Write`, a snapshot's object, an object-state record."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def object_json(self) -> bytes | None: ...


# The author object-state records for an object a snapshot listed: the change itself was not seen.
SNAPSHOT_AUTHOR = WorkAuthor(Outcome.NOT_ATTEMPTED, tier="snapshot")


@dataclass(frozen=True, slots=True)
class Skip:
    """Work that ends without a commit: counted under `reason`; `detail` is logged when not empty,
    as a warning when `warn` (something is wrong with the record), else as information."""

    reason: SkipReason
    detail: str = ""
    warn: bool = False


@dataclass(frozen=True, slots=True)
class Reject:
    """A record the branch can never apply (no safe path, not an object): skipped as a bad record
    and parked on the dead-letter topic with `error`; `detail` is the warning logged."""

    error: LayoutError | RenderError
    detail: str


@dataclass(frozen=True, slots=True)
class Staged:
    """A write that goes into the branch's open window: where, what, and the state it implies."""

    item: WorkItem
    write: Write
    path: str
    # the rendered document (or the sealed one), None for a delete
    content: bytes | None
    state: PendingRecord | None
    silence_s: float
    max_age_s: float
    # the change as the in-place writer needs it; None where the worker writes canonical files only
    change: LiveChange | None = None


@dataclass(frozen=True, slots=True)
class Closed:
    """A window that closed: the plan of its commit and the offsets that commit settles."""

    plan: Plan
    offsets: list[Offset]


def _plan(
    kind: PlanKind, target: str, at: LogPosition, byline: Byline, writes: Writes, **parts: Unpack[PlanParts]
) -> Plan:
    """Every plan is built here (windows, snapshots, retired targets, rebuilds)."""
    return Plan(kind=kind, target=target, at=at, byline=byline, writes=writes, **parts)


def rebuild_plan(at: LogPosition, target: str, committer: Identity, source: str, time_s: int) -> Plan:
    """A committer plan rebuilding `target` from `source` (it consumed no record: `at` claims none)."""
    return _plan(PlanKind.REBUILD, target, at, Byline.committer(committer, time_s), {}, resource=source)


def _deletes(paths: Iterable[str]) -> Writes:
    return {p: (None, ChangedObject(Operation.DELETE, "", "", "", "", p)) for p in paths}


def _where(item: WorkItem) -> str:
    return f"{item.partition}:{item.offset}"


def _begin_revision(snapshot: Collected) -> str:
    """The list's revision as its `ResyncBegin` gave it (its end may name a newer one)."""
    opened = snapshot.begin.body
    return opened.resource_version if isinstance(opened, ResyncBegin) else ""


@dataclass(slots=True)
class _Listed:
    """What the objects a snapshot (or one of its parts) holds make: the plan's writes, object
    states, in-place changes, and the objects left out."""

    writes: Writes = field(default_factory=dict)
    states: list[PendingRecord] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    changes: dict[str, LiveChange] = field(default_factory=dict)


class Decider:
    """The decisions of one (provider, branch) FIFO, and the state they read and keep."""

    def __init__(
        self,
        settings: Settings,
        provider: ProviderSettings,
        branch: str,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`wall` (seconds) stamps object-state records and the author time of records without one."""
        self.provider = provider
        self.branch = branch
        self.committer = committer_identity(provider.committer.name, provider.committer.email)
        self._wall = wall
        self._targets: dict[str, TargetSettings] = {t.name: t for t in settings.targets}
        self._rules: dict[str, TargetRules] = {}
        self.versions = VersionLedger()
        # the live objects of files edited in place, for their next change (inplace.py)
        self.seen = LastSeen()
        self.snapshots = SnapshotBook()
        # None until the shell loads it (object-state not written: nothing is tracked)
        self.book: StateBook | None = None
        self.window: CommitWindow | None = None
        self._window_states: list[PendingRecord] = []

    # configuration -----------------------------------------------------------------------------
    def update_targets(self, settings: Settings) -> None:
        """A changed configuration's targets apply from the next record on."""
        self._targets = {t.name: t for t in settings.targets}
        self._rules = {}

    @property
    def target_names(self) -> frozenset[str]:
        return frozenset(self._targets)

    def target(self, name: str) -> TargetSettings | None:
        return self._targets.get(name)

    def own_targets(self) -> frozenset[str]:
        """The configured targets that write to this branch."""
        return frozenset(
            t.name
            for t in self._targets.values()
            if t.provider == self.provider.name and (t.branch or self.provider.default_branch) == self.branch
        )

    def _at(self, offset: Offset) -> LogPosition:
        return LogPosition.at(self.provider.name, self.branch, offset)

    def _time_s(self, observed_at_ms: int) -> int:
        return (observed_at_ms // 1000) or int(self._wall())

    def _tracked(self, item: WorkItem) -> StateBook | None:
        """The state book when `item`'s target is configured on this branch (work routed here under
        an older configuration must not describe the target's current branch)."""
        if self.book is None or item.stream.target not in self.own_targets():
            return None
        return self.book

    @staticmethod
    def sensitive(target: TargetSettings | None) -> frozenset[GroupResource]:
        """The target's extra sensitive types (Secrets always are)."""
        if target is None or target.encryption is None:
            return frozenset()
        return sensitive_set(target.encryption.sensitive_resources)

    def _operations(self, item: WorkItem, scope: str) -> frozenset[str]:
        """The changes the target's rules let reach Git for the item's type in `scope`
        (`pipeline.targetrules`); all for a target this configuration does not have."""
        stream = item.stream
        target = self.target(stream.target)
        if target is None:
            return ALL_OPERATIONS
        rules = self._rules.get(target.name)
        if rules is None:
            try:
                rules = self._rules[target.name] = TargetRules.of(target)
            except SelectorError:
                return ALL_OPERATIONS
        return rules.operations(GroupResource(stream.group, stream.resource), scope)

    def filtered(self, item: WorkItem, operation: Operation, scope: str) -> bool:
        """Whether the rules keep `operation` of this item's type in `scope` from Git."""
        return operation not in self._operations(item, scope)

    # recall and redelivery ---------------------------------------------------------------------
    def recall(self, items: Iterable[WorkItem], homes: Homes | None = None) -> Steps[None]:
        """Seed the version ledger from work the branch tip already carries (records before its
        offset): a new owner must not write a version the previous owner already replaced. With
        `homes`, the objects of files edited in place are kept for their next change. One step
        per object: the records before the tip may hold a whole snapshot (`pipeline.slices`)."""
        for item in items:
            if (item.provider, item.branch) != (self.provider.name, self.branch):
                continue
            body = item.body
            if isinstance(body, Write):
                yield
                self._recall(item, body.namespace, body.name, body.resource_version, body.uid)
                if homes is not None:
                    self._remember(
                        item.stream.target, item.path, item.stream.group, item.stream.resource, body, homes
                    )
            elif isinstance(body, ResyncChunk):
                for obj in body.objects:
                    yield
                    self._recall(item, obj.namespace, obj.name, obj.resource_version, obj.uid)
                    if homes is not None:
                        self._remember(
                            item.stream.target, item.path, item.stream.group, item.stream.resource, obj, homes
                        )

    def remember_states(self, states: Iterable[ObjectState], homes: Homes) -> Steps[None]:
        """Keep the objects of files edited in place, as last committed, for their next change: a
        new owner's first change of such an object is then its difference from the committed one.
        One step per state (each is parsed): a new owner reads one per object of its targets."""
        for state in states:
            yield
            self._remember(state.target, state.path, state.group, state.resource, state, homes)

    def _remember(
        self, target: str, target_path: str, group: str, resource: str, obj: Live, homes: Homes
    ) -> None:
        if is_sensitive(group, resource, self.sensitive(self.target(target))) or obj.object_json is None:
            return
        try:
            folder_path = normalize_target_path(target_path)
            folder = homes.folder(folder_path)
            if folder is None or not indexed(folder, group, obj.namespace, obj.name):
                return
            path = canonical_path(folder_path, group, resource, obj.namespace, obj.name)
            parsed = parse_object_json(obj.object_json)
        except (LayoutError, RenderError):
            return
        kind = parsed.get("kind")
        if isinstance(kind, str) and remembered(folder, HomeKey(group, kind, obj.namespace, obj.name), path):
            self.seen.note(path, live_object(parsed))

    def _recall(self, item: WorkItem, namespace: str, name: str, version: str, uid: str) -> None:
        try:
            path = canonical_path(
                normalize_target_path(item.path), item.stream.group, item.stream.resource, namespace, name
            )
        except LayoutError:
            return
        self.versions.applied(path, version, uid)

    def redelivered(self, item: WorkItem) -> list[PendingRecord]:
        """Object state of a write the branch already carries: written again unless the topic has it.

        Covers a crash after the push and before the object-state append. A snapshot's records are
        not judged one by one: its end says whether the branch carries it (`carried`).
        """
        stream = item.stream
        book = self._tracked(item)
        body = item.body
        if book is None or not isinstance(body, Write):
            return []
        target = self.target(stream.target)
        if body.operation == Operation.DELETE and (target is None or target.prune == Prune.NEVER):
            return []
        sealed = is_sensitive(stream.group, stream.resource, self.sensitive(target))
        found = self._write_state(item, body, sealed, None)
        return [found] if found is not None else []

    def carried(self, done: Carried, end: WorkItem) -> list[PendingRecord]:
        """Object state of a snapshot the branch already carries, written again unless the topic
        has it; its sweep is not re-derived (the next snapshot removes those objects;
        docs/commit-worker.md)."""
        book = self._tracked(end)
        if book is None:
            return []
        stream = end.stream
        sealed = is_sensitive(stream.group, stream.resource, self.sensitive(self.target(stream.target)))
        found = [
            book.upsert(self._state_of(end, o, sealed, SNAPSHOT_AUTHOR, None)) for o in done.snapshot.objects
        ]
        return [r for r in found if r is not None]

    # object state ------------------------------------------------------------------------------
    def _state_of(
        self, item: WorkItem, obj: ResyncObject, sealed: bool, author: WorkAuthor, document: bytes | None
    ) -> ObjectState:
        """The state record; `document` is the rendered file as committed (rendered here when None)."""
        stream = item.stream
        if sealed:
            document = b""
        elif document is None:
            try:
                document = render_object(parse_object_json(obj.object_json))
            except RenderError:
                document = b""
        return ObjectState(
            target=stream.target,
            provider=self.provider.name,
            branch=self.branch,
            path=item.path,
            cluster=stream.cluster,
            group=stream.group,
            version=stream.version,
            resource=stream.resource,
            namespace=obj.namespace,
            name=obj.name,
            uid=obj.uid,
            resource_version=obj.resource_version,
            object_json=obj.object_json,
            sealed=sealed,
            document=document,
            author=author,
            partition=item.partition,
            offset=item.offset,
            committed_at_ms=int(self._wall() * 1000),
        )

    def _write_state(
        self, item: WorkItem, write: Write, sealed: bool, document: bytes | None
    ) -> PendingRecord | None:
        """The object-state record a committed `Write` implies (None: the topic has it already)."""
        stream = item.stream
        book = self._tracked(item)
        if book is None:
            return None
        if write.operation == Operation.DELETE:
            key = ObjectKey(stream.target, stream.group, stream.resource, write.namespace, write.name)
            return book.remove(key, (item.partition, item.offset))
        obj = ResyncObject(
            write.namespace, write.name, write.uid, write.resource_version, write.object_json or b"null"
        )
        return book.upsert(self._state_of(item, obj, sealed, write.author, document))

    # sealing -----------------------------------------------------------------------------------
    @staticmethod
    def sealed_content(item: WorkItem, namespace: str, name: str, content: bytes) -> bytes | Skip:
        """A sensitive object's content if it is a SOPS document plaintext only where it may be.

        The watch stage seals sensitive objects of targets with encryption; anything else (no
        encryption configured, a plaintext record, a document with a plaintext field outside the
        readable ones of `pipeline.sealing.readable`) is refused here so it never reaches Git.
        """
        where = f"branch work {_where(item)}: {item.stream.resource} {namespace}/{name} not written"
        try:
            SealedDocument.parse(content)
        except PlaintextFieldError as exc:
            detail = f"{where}: the sealed document is refused ({exc}); see docs/secrets.md"
            return Skip(SkipReason.SEALED_PLAINTEXT, detail, warn=True)
        except SealedDocumentError as exc:
            detail = (
                f"{where}: sensitive content must be SOPS-encrypted ({exc}); configure targets[].encryption"
            )
            return Skip(SkipReason.SENSITIVE_UNENCRYPTED, detail, warn=True)
        return content

    def _bad(self, item: WorkItem, problem: Exception) -> str:
        return f"branch work {_where(item)} for {self.provider.name}/{self.branch} skipped: {problem}"

    @staticmethod
    def _older(item: WorkItem, path: str, version: str) -> Skip:
        detail = (
            f"branch work {_where(item)}: {path} at resourceVersion {version} is older than the "
            "version already applied; skipped"
        )
        return Skip(SkipReason.OLDER_VERSION, detail)

    # writes and windows ------------------------------------------------------------------------
    def write(self, item: WorkItem, write: Write, homes: Homes | None = None) -> Staged | Skip | Reject:
        """Where a `Write` goes and what it holds, or why it does not reach Git.

        A write that is staged is recorded in the version ledger now: the next record of the same
        object is compared with it. With `homes` (the folders' home indexes) it carries the change
        the in-place writer places when the window is committed (`pipeline.commit.inplace`).
        """
        stream = item.stream
        target = self.target(stream.target)
        prune = target.prune if target is not None else Prune.NEVER
        deleting = write.operation == Operation.DELETE
        sensitive = self.sensitive(target)
        sealed = is_sensitive(stream.group, stream.resource, sensitive)
        content: bytes | None = None
        obj: dict[str, Any] | None = None
        try:
            folder = normalize_target_path(item.path)
            path = canonical_path(
                folder, stream.group, stream.resource, write.namespace, write.name, sensitive
            )
            if not deleting and not sealed:
                obj = parse_object_json(write.object_json or b"null", write.name)
                content = render_object(obj)
        except (LayoutError, RenderError) as exc:
            return Reject(exc, self._bad(item, exc))
        if deleting and prune == Prune.NEVER:
            return Skip(SkipReason.PRUNE_NEVER)
        if self.filtered(item, write.operation, write.namespace):
            return Skip(SkipReason.OPERATION_FILTERED)
        if not deleting and sealed:
            sealed_content = self.sealed_content(item, write.namespace, write.name, write.object_json or b"")
            if isinstance(sealed_content, Skip):
                return sealed_content
            content = sealed_content
        if self.versions.is_older(path, write.resource_version):
            return self._older(item, path, write.resource_version)
        self.versions.applied(path, write.resource_version, write.uid)
        silence_s, max_age_s = window_limits_s(self.provider, target)
        state = self._write_state(item, write, sealed, content)
        change = None
        if homes is not None:
            if sealed:
                obj = sealed_object(content)
            change = self._change(item, write.namespace, write.name, path, obj, homes)
        return Staged(item, write, path, content, state, silence_s, max_age_s, change)

    # in-place writes ---------------------------------------------------------------------------
    def _change(
        self,
        item: WorkItem,
        namespace: str,
        name: str,
        path: str,
        obj: Mapping[str, Any] | None,
        homes: Homes,
        *,
        listed: bool = False,
    ) -> LiveChange | None:
        """The change of one object for the in-place writer, and the object kept for its next
        change when its file is edited in place. None when the folder is not indexed, or a
        delete's kind is not known (the canonical file is then deleted, as without an index).
        A sealed object (a sensitive type; `obj` is its SOPS document) is always rewritten
        whole, so nothing of it is kept."""
        stream = item.stream
        folder_path = normalize_target_path(item.path)
        folder = homes.folder(folder_path)
        if folder is None:
            return None
        target = self.target(stream.target)
        sealed = is_sensitive(stream.group, stream.resource, self.sensitive(target))
        before = None if sealed else self.seen.get(path)
        after = live_object(obj) if obj is not None else None
        known = after or before
        kind = known.get("kind") if known is not None else None
        if not isinstance(kind, str) or not kind:
            kind = kind_of(folder, stream.group, stream.resource, namespace, name)
        if not kind:
            return None
        key = HomeKey(stream.group, kind, namespace, name)
        placed = placed_object(key, stream.version, stream.resource, known, sensitive=sealed)
        templated = target is not None and target.placement_policy.applies(placed)
        kept = not sealed and remembered(folder, key, path, placed=templated)
        self.seen.note(path, after if kept else None)
        items = () if listed else (item,)
        return LiveChange(folder_path, key, placed, before, after, items, listed)

    def closing(self, staged: Staged) -> CloseReason | None:
        """Why the open window must close before `staged` joins it, if it must: the write was made
        a silence away from it, or past its maximum age, or by another author or for another target."""
        window = self.window
        if window is None:
            return None
        write = staged.write
        made_ms = event_time_ms(write.author, staged.item.observed_at_ms)
        if window.apart_from(made_ms):
            return CloseReason.SILENCE
        if window.aged_before(made_ms):
            return CloseReason.MAX_AGE
        if window.request_due(made_ms):
            return CloseReason.COMMIT_REQUEST
        if window.key != CommitWindow.key_of(write.author, staged.item.stream.target):
            return CloseReason.AUTHOR_CHANGE
        return None

    def stage(self, staged: Staged, now: float) -> CloseReason | None:
        """Add `staged` to the open window (opening one at `now`); why it closes right away, if it does."""
        item, write = staged.item, staged.write
        window = self.window
        if window is None:
            window = self.window = CommitWindow(
                CommitWindow.key_of(write.author, item.stream.target),
                write.author,
                item.stream.target,
                deadline=0.0,
                silence_s=staged.silence_s,
                max_age_s=staged.max_age_s,
                opened_at=now,
            )
        obj = ChangedObject(
            write.operation,
            item.stream.group,
            item.stream.version,
            item.stream.resource,
            write.namespace,
            write.name,
        )
        window.add(
            staged.path,
            staged.content,
            obj,
            write.author,
            (item.partition, item.offset),
            item.observed_at_ms,
            staged.change,
        )
        if staged.state is not None:
            self._window_states.append(staged.state)
        if window.size >= self.provider.window_max_bytes:
            return CloseReason.SIZE_CAP
        if staged.silence_s <= 0:
            return CloseReason.WINDOW_ZERO
        window.touch(now)
        return None

    def close(self) -> Closed | None:
        """Take the open window out: its commit's plan and the offsets it settles (None: no window)."""
        window, self.window = self.window, None
        if window is None:
            return None
        states, self._window_states = self._window_states, []
        return Closed(self.window_plan(window, states), window.offsets)

    def window_plan(self, window: CommitWindow, states: list[PendingRecord]) -> Plan:
        """The commit of a closed window: its author (or unknown, or the committer), writes and states."""
        author = window.author
        identity = author_identity(
            author.outcome, author.username, author.display_name, author.email, self.committer
        )
        kind = author_kind(author.outcome, author.username)
        if kind == COMMITTER_KIND:
            label = self.committer.name
        elif kind == UNRESOLVED_KIND:
            label = UNRESOLVED.name
        else:
            label = author.username
        byline = Byline(identity, kind, label, self._time_s(window.last_observed_ms), tuple(window.tiers))
        target = self.target(window.target)
        # a CommitRequest's own message wins over the target's template
        template = flush.request_template(window) or (target.commit_message if target is not None else None)
        return _plan(
            PlanKind.WINDOW,
            window.target,
            self._at(window.offsets[-1]),
            byline,
            window.writes,
            observed_at_ms=window.first_observed_ms,
            template=template,
            states=states,
            requests=tuple(window.requests),
            changes=dict(window.changes),
        )

    # snapshots ---------------------------------------------------------------------------------
    def snapshot_steps(
        self, done: Complete, end: WorkItem, body: ResyncEnd, tree: Files, homes: Homes | None = None
    ) -> Steps[tuple[Plan, list[Skip]]]:
        """The committer's `reconciled` commit of a finished snapshot, and the objects it leaves out.

        Each listed object is written as its event would be (CREATE when its file is new, UPDATE
        else), through the same rule filter, version check and sealing check as a `Write`. The
        sweep keeps what the snapshot listed (in this commit and in its parts before it) and what
        was written after the list's revision; under prune `Always` it deletes the rest of the
        scope, and their object states go too. With `homes`, an object that lives in a file edited
        in place is left as that file has it and remembered for its next change; a new one goes
        where the placement puts it.

        One step per object (rendering, hashing and encoding its state record), so a large
        snapshot is planned in slices (`pipeline.slices`).
        """
        snapshot = done.snapshot
        stream = end.stream
        target = self.target(stream.target)
        target_path = normalize_target_path(end.path)
        sensitive = self.sensitive(target)
        listed = yield from self._listed_steps(snapshot, end, tree, homes)
        states = listed.states
        revision = body.resource_version or _begin_revision(snapshot)
        # objects written after the list's revision are not in it, and must not be swept; the
        # finished snapshot's own set is used, not copied (it names every object of the collection)
        snapshot.keep.update(self.versions.newer_than(revision))
        keep = snapshot.keep
        prune = target is not None and target.prune == Prune.ALWAYS
        prune = prune and not self.filtered(end, Operation.DELETE, stream.scope)
        book = self._tracked(end)
        if prune and book is not None:
            states += yield from self._swept_states(book, end, sensitive, keep)
        if prune and homes is not None:
            yield from self._sweep_homes(end, homes, snapshot.listed, keep, listed.writes, listed.changes)
        plan = _plan(
            PlanKind.SNAPSHOT,
            stream.target,
            self._at((end.partition, end.offset)),
            Byline.committer(self.committer, self._time_s(end.observed_at_ms)),
            listed.writes,
            observed_at_ms=snapshot.begin.observed_at_ms,
            sweep=Sweep(target_path, stream.group, stream.resource, stream.scope, keep, prune=prune),
            states=states,
            resource=stream.resource,
            revision=revision,
            template=target.commit_message if target is not None else None,
            changes=listed.changes,
        )
        return plan, listed.skips

    def part_steps(
        self, snapshot: Collected, item: WorkItem, tree: Files, homes: Homes | None = None
    ) -> Steps[tuple[Plan, list[Skip]]]:
        """One part of a snapshot committed in parts (`SnapshotBook.part_due`): the objects it holds,
        written as `snapshot_steps` writes them, without a sweep. The plan claims no offset
        (`PlanKind.SNAPSHOT_PART`): a restart must read the snapshot again from its `ResyncBegin`,
        and then the part writes what the tree already has. What it listed is kept on `snapshot`
        for the sweep of the last part; its objects are released as they are planned."""
        stream = item.stream
        target = self.target(stream.target)
        listed = yield from self._listed_steps(snapshot, item, tree, homes)
        plan = _plan(
            PlanKind.SNAPSHOT_PART,
            stream.target,
            self._at((item.partition, item.offset)),
            Byline.committer(self.committer, self._time_s(item.observed_at_ms)),
            listed.writes,
            observed_at_ms=snapshot.begin.observed_at_ms,
            states=listed.states,
            resource=stream.resource,
            revision=_begin_revision(snapshot),
            template=target.commit_message if target is not None else None,
            changes=listed.changes,
        )
        return plan, listed.skips

    def _listed_steps(
        self, snapshot: Collected, item: WorkItem, tree: Files, homes: Homes | None
    ) -> Steps[_Listed]:
        """The writes, object states and in-place changes of the objects `snapshot` holds; each
        object's name and canonical path join the snapshot's `listed` and `keep`."""
        stream = item.stream
        target = self.target(stream.target)
        target_path = normalize_target_path(item.path)
        sensitive = self.sensitive(target)
        sealed = is_sensitive(stream.group, stream.resource, sensitive)
        found = _Listed()
        book = self._tracked(item)
        # the plan takes the collected objects over one by one, so an object's record is released
        # as its file and state are made: the collected list and the plan never both hold it whole
        objects, snapshot.objects = snapshot.objects, []
        objects.reverse()
        while objects:
            obj = objects.pop()
            names = snapshot.listed.get(obj.namespace)
            if names is None:
                names = snapshot.listed[sys.intern(obj.namespace)] = set()
            names.add(obj.name)
            yield
            try:
                path = canonical_path(
                    target_path, stream.group, stream.resource, obj.namespace, obj.name, sensitive
                )
            except LayoutError as exc:
                found.skips.append(Skip(SkipReason.BAD_RECORD, self._bad(item, exc), warn=True))
                continue
            snapshot.keep.add(path)
            operation = Operation.CREATE if tree.get(path) is None else Operation.UPDATE
            if self.filtered(item, operation, obj.namespace):
                continue
            if self.versions.is_older(path, obj.resource_version):
                found.skips.append(self._older(item, path, obj.resource_version))
                continue
            content: bytes | Skip
            if sealed:
                content = self.sealed_content(item, obj.namespace, obj.name, obj.object_json)
            else:
                try:
                    parsed = parse_object_json(obj.object_json, obj.name)
                    content = render_object(parsed)
                except RenderError as exc:
                    content = Skip(SkipReason.BAD_RECORD, self._bad(item, exc), warn=True)
            if isinstance(content, Skip):
                found.skips.append(content)
                continue
            if homes is not None:
                live = sealed_object(content) if sealed else parsed
                change = self._change(item, obj.namespace, obj.name, path, live, homes, listed=True)
                if change is not None:
                    found.changes[path] = change
            self.versions.applied(path, obj.resource_version, obj.uid)
            if book is not None:
                state = book.upsert(self._state_of(item, obj, sealed, SNAPSHOT_AUTHOR, content))
                if state is not None:
                    found.states.append(state)
            changed = ChangedObject(
                Operation.UPDATE,
                stream.group,
                stream.version,
                stream.resource,
                obj.namespace,
                obj.name,
            )
            found.writes[path] = (content, changed)
        return found

    def _sweep_homes(
        self,
        end: WorkItem,
        homes: Homes,
        listed: Mapping[str, AbstractSet[str]],
        keep: AbstractSet[str],
        writes: Writes,
        changes: dict[str, LiveChange],
    ) -> Steps[None]:
        """The removals of the objects a snapshot no longer lists whose documents live off their
        canonical paths (placed by a template, or in a user's file): one `swept` change each, which
        `place` turns into the document's removal, or into nothing when the document may not go.
        The canonical sweep only lists canonical paths, so without these such a document stayed
        until a delete event came for it."""
        stream = end.stream
        folder_path = normalize_target_path(end.path)
        folder = homes.folder(folder_path)
        if folder is None:
            return
        sensitive = self.sensitive(self.target(stream.target))
        sealed = is_sensitive(stream.group, stream.resource, sensitive)
        for key in unlisted_homes(folder, stream.group, stream.resource, stream.scope, listed):
            yield
            try:
                path = canonical_path(
                    folder_path, stream.group, stream.resource, key.namespace, key.name, sensitive
                )
            except LayoutError:
                continue
            if path in keep or path in writes:
                continue
            placed = placed_object(key, stream.version, stream.resource, None, sensitive=sealed)
            self.seen.note(path, None)
            changes[path] = LiveChange(folder_path, key, placed, None, None, swept=True)
            writes[path] = (
                None,
                ChangedObject(
                    Operation.DELETE,
                    stream.group,
                    stream.version,
                    stream.resource,
                    key.namespace,
                    key.name,
                ),
            )

    def _swept_states(
        self, book: StateBook, end: WorkItem, sensitive: frozenset[GroupResource], keep: AbstractSet[str]
    ) -> Steps[list[PendingRecord]]:
        """Tombstones for the objects of a snapshot's scope that the snapshot no longer lists."""
        stream = end.stream
        target_path = normalize_target_path(end.path)
        found: list[PendingRecord] = []
        for key in list(book.live_keys(stream.target, stream.group, stream.resource, stream.scope or None)):
            yield
            try:
                path = canonical_path(
                    target_path, key.group, key.resource, key.namespace, key.name, sensitive
                )
            except LayoutError:
                continue
            if path not in keep and (tombstone := book.remove(key, (end.partition, end.offset))):
                found.append(tombstone)
        return found

    def absent_candidates(self, snapshot: Plan, end: WorkItem, tree: Files) -> list[str]:
        """Files a finished snapshot no longer lists that its target deletes as absent (`OnEvent`).

        The shell keeps those this pipeline wrote (`versions.knows`, else the file's history) and
        hands them to `absent_plans`; under another prune mode, or when the rules keep deletions
        from Git, there are none.
        """
        target = self.target(end.stream.target)
        sweep = snapshot.sweep
        if sweep is None or target is None or target.prune != Prune.ON_EVENT:
            return []
        if self.filtered(end, Operation.DELETE, end.stream.scope):
            return []
        return orphans(tree, sweep)

    def absent_plans(self, snapshot: Plan, end: WorkItem, body: ResyncEnd, written: list[str]) -> list[Plan]:
        """The deletions of absent files this pipeline wrote, one commit per author, as a watch
        DELETE would be: under the author the deletion evidence names for the file's object
        (matched by uid, or by name for a name-keyed delete), else unknown. They claim the snapshot's
        offset but settle nothing: the snapshot's own commit does."""
        stream = end.stream
        sweep = snapshot.sweep
        assert sweep is not None
        evidence = body.removals or ()
        by_uid = {r.uid: r.author for r in evidence if r.uid}
        by_name = {(r.namespace, r.name): r.author for r in evidence if not r.uid}
        fallback = NOT_ATTEMPTED if body.removals is None else WorkAuthor(Outcome.UNRESOLVED)
        windows: dict[WorkAuthor, CommitWindow] = {}
        states: dict[WorkAuthor, list[PendingRecord]] = {}
        book = self._tracked(end)
        here = (end.partition, end.offset)
        for path in written:
            namespace, name = object_of(path, sweep.target_path)
            author = by_uid.get(self.versions.uid_of(path)) or by_name.get((namespace, name)) or fallback
            window = windows.get(author)
            if window is None:
                window = windows[author] = CommitWindow(
                    CommitWindow.key_of(author, stream.target),
                    author,
                    stream.target,
                    deadline=0.0,
                    silence_s=0.0,
                    max_age_s=0.0,
                )
            obj = ChangedObject(
                Operation.DELETE, stream.group, stream.version, stream.resource, namespace, name
            )
            window.add(path, None, obj, author, here, end.observed_at_ms)
            self.versions.applied(path, snapshot.revision)
            key = ObjectKey(stream.target, stream.group, stream.resource, namespace, name)
            if book is not None and (tombstone := book.remove(key, here)):
                states.setdefault(author, []).append(tombstone)
        return [self.window_plan(window, states.get(author, [])) for author, window in windows.items()]

    # targets -----------------------------------------------------------------------------------
    def retire(self, item: WorkItem, body: TargetDeleted, tree: Files) -> Plan:
        """A deleted target's committer commit: under `remove_files` every document under its
        folder goes (and their object states), claiming this record's offset either way."""
        folder = normalize_target_path(item.path)
        gone = documents(tree, folder) if body.remove_files else []
        states: list[PendingRecord] = []
        if body.remove_files and self.book is not None:
            here = (item.partition, item.offset)
            for key in list(self.book.target_keys(item.stream.target)):
                if tombstone := self.book.remove(key, here):
                    states.append(tombstone)
        return _plan(
            PlanKind.RETIRE,
            item.stream.target,
            self._at((item.partition, item.offset)),
            Byline.committer(self.committer, self._time_s(item.observed_at_ms)),
            _deletes(gone),
            observed_at_ms=item.observed_at_ms,
            states=states,
            retired=Retired(folder, body.prune, body.reason),
            scanned=True,
        )

    def unlisted(self, target: TargetSettings, tree: Files, homes: Homes | None = None) -> Plan | None:
        """The rebuild commit deleting the documents under `target`'s folder the book does not hold.

        For a history replay into a branch that had content: what the replayed work leaves is in
        the book, anything else in the folder is gone from the cluster (or never was in it). A
        file where a held object lives (`homes`: a user's file at an object's path, edited in
        place) is kept with it.
        """
        if self.book is None:
            return None
        folder = normalize_target_path(target.path)
        index = homes.folder(folder) if homes is not None else None
        sensitive = self.sensitive(target)
        keep: set[str] = set()
        for key in self.book.target_keys(target.name):
            with contextlib.suppress(LayoutError):
                keep.add(canonical_path(folder, key.group, key.resource, key.namespace, key.name, sensitive))
            if index is not None and (
                kind := kind_of(index, key.group, key.resource, key.namespace, key.name)
            ):
                home = HomeKey(key.group, kind, key.namespace, key.name)
                keep.update(h.path for h in index.index.candidates(home))
        gone = [p for p in documents(tree, folder) if p not in keep]
        if not gone:
            return None
        plan = rebuild_plan(self._at((0, 0)), target.name, self.committer, "history", int(self._wall()))
        return dataclasses.replace(plan, writes=_deletes(gone), scanned=True)
