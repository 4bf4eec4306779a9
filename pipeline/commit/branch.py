"""One (provider, branch) FIFO: commit windows, snapshots, commits and compare-and-swap pushes.

The worker applies branch work strictly in log order. Offsets are reported as settled only when
their effect is on the remote (or proved to change nothing), so the consumer never commits an
offset for work a crash could still lose. Work the branch tip already carries (by its
`Reverser-Offset` trailer) is skipped, so a redelivery never makes a second commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from pipeline.attribution.selector import SelectorError
from pipeline.backoff import Backoff
from pipeline.codec.branch_work import (
    NOT_ATTEMPTED,
    CommitRequested,
    LateAuthor,
    Outcome,
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    TargetDeleted,
    WorkAuthor,
    WorkItem,
    Write,
)
from pipeline.codec.commit_request_result import RequestResult
from pipeline.codec.object_state import ObjectKey, ObjectState
from pipeline.codec.target_result import TargetResult
from pipeline.commit import flush, metrics
from pipeline.commit.gitrepo import GitRemoteError, LocalRepo, PushRejected, identity_line
from pipeline.commit.identity import UNRESOLVED, author_identity, author_kind, committer_identity
from pipeline.commit.layout import (
    LayoutError,
    canonical_path,
    is_sealed_path,
    is_sensitive,
    normalize_target_path,
    object_of,
)
from pipeline.commit.messages import ChangedObject, parse_offset, trusted_offset
from pipeline.commit.notes import LateAuthors
from pipeline.commit.plan import Applied, Plan, Retired, Sweep, apply_plan, blob_sha, message_for, orphans
from pipeline.commit.rebuild import documents
from pipeline.commit.snapshots import Collected, Skipped, SnapshotBook, push_due_at
from pipeline.commit.statebook import StateBook
from pipeline.commit.versions import VersionLedger
from pipeline.commit.window import CloseReason, CommitWindow, event_time_ms, window_limits_s
from pipeline.commit.yamlrender import RenderError, parse_object_json, render_object
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log.api import LogError, PendingRecord
from pipeline.models import GroupResource
from pipeline.redaction import redact_url
from pipeline.sealing import PlaintextFieldError, SealedDocument, SealedDocumentError, sensitive_set
from pipeline.sealing.sopsrules import sops_rules, sops_rules_path
from pipeline.targetrules import ALL_OPERATIONS, TargetRules

__all__ = ["BranchWorker", "DeletionAhead", "History", "Hook", "LoadState", "Offset", "Reject", "StateSink"]

logger = logging.getLogger(__name__)

Offset = tuple[int, int]
Hook = Callable[[str], Awaitable[None]]
# (partition, offset) -> the branch-work records shortly before and up to that offset, in log order
History = Callable[[int, int], Awaitable[list[WorkItem]]]
# The log-end offset of every branch-work partition: bounds the offsets a trailer may claim.
LogEnds = Callable[[], Awaitable[Mapping[int, int]]]
# The object-state records of these targets (the first read of `<prefix>.object-state`).
LoadState = Callable[[frozenset[str]], Awaitable[list[ObjectState]]]
# Takes object-state records of settled work; they must be on the log before its offsets commit.
StateSink = Callable[[list[PendingRecord]], None]
# Parks a work record the branch cannot apply (on the dead-letter topic) before it is settled.
Reject = Callable[[WorkItem, Exception], Awaitable[None]]
# Whether a `TargetDeleted` of the item's target follows the item on its partition (read from the log).
DeletionAhead = Callable[[WorkItem], Awaitable[bool]]
PUSH_ATTEMPTS = 3
# First wait after a push or sync against the Git remote failed (then doubling, jittered).
REMOTE_RETRY_INITIAL_S = 1.0
# The author object-state records for an object a snapshot listed: the change itself was not seen.
SNAPSHOT_AUTHOR = WorkAuthor("NOT_ATTEMPTED", tier="snapshot")
MAX_PENDING_COMMITS = 10_000
TRAILER_SCAN_COMMITS = 10_000


@dataclass(slots=True)
class _Pending:
    """A local commit not yet on the remote, with the plan to replay it after a conflict."""

    plan: Plan
    sha: str


class BranchWorker:
    """The single writer of one branch; `handle` takes work in log order, `tick` fires timers."""

    def __init__(
        self,
        settings: Settings,
        provider: ProviderSettings,
        branch: str,
        repo: LocalRepo,
        on_settled: Callable[[list[Offset]], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        hook: Hook | None = None,
        history: History | None = None,
        log_ends: LogEnds | None = None,
        load_state: LoadState | None = None,
        on_state: StateSink | None = None,
        on_result: Callable[[TargetResult | RequestResult], Awaitable[None]] | None = None,
        reject: Reject | None = None,
        deletion_ahead: DeletionAhead | None = None,
    ) -> None:
        """`on_result` hears each target's last commit and push outcome, and what became of each
        CommitRequest (custom-resource status);
        `deletion_ahead` lets records of a target the configuration lacks be skipped (`_gone`)."""
        self._on_result = on_result
        self._deletion_ahead = deletion_ahead
        self.provider = provider
        self._load_state = load_state
        self._on_state = on_state
        self._reject = reject
        # None until sync when object-state is not written (no sink): then nothing is tracked.
        self._book: StateBook | None = None
        self._window_states: list[PendingRecord] = []
        self._finalized_states: list[PendingRecord] = []
        self._history = history
        self._log_ends = log_ends
        self.branch = branch
        self.repo = repo
        self._targets: dict[str, TargetSettings] = {t.name: t for t in settings.targets}
        self._rules: dict[str, TargetRules] = {}
        # targets the configuration lacks whose deletion is behind this FIFO's position (applied
        # here, or found missing ahead on the log): their records are skipped (`_gone`)
        self._deleted: set[str] = set()
        # targets the configuration lacks whose `TargetDeleted` is still ahead on the log
        self._retiring: set[str] = set()
        self._on_settled = on_settled
        self._clock = clock
        self._wall = wall
        self._hook = hook
        self._size_cap = provider.window_max_bytes
        self.committer = committer_identity(provider.committer.name, provider.committer.email)
        self._late = LateAuthors(repo, provider.name, branch, self.committer)
        self.synced = False
        self._remote_tip: str | None = None
        self._tip: str | None = None
        self._tree = repo.tree(None)
        self._skip: dict[int, int] = {}
        self._window: CommitWindow | None = None
        self.versions = VersionLedger()
        self._snapshots = SnapshotBook()
        self._pending: list[_Pending] = []
        self._finalized: list[Offset] = []
        self._push_due: float | None = None
        self._last_push: float | None = None
        self._push_backoff = self._remote_backoff()
        self._labels = (provider.name, branch)
        self._requests = flush.RequestDesk(provider.name, branch, self._tell, clock, wall)

    # state ---------------------------------------------------------------------------------
    @property
    def tip(self) -> str | None:
        """The local tip (remote tip plus unpushed commits)."""
        return self._tip

    @property
    def remote_tip(self) -> str | None:
        return self._remote_tip

    @property
    def pending_commits(self) -> int:
        return len(self._pending)

    @property
    def window(self) -> CommitWindow | None:
        return self._window

    @property
    def unsettled(self) -> int:
        """Work records received but not yet settled (the pending-work gauge)."""
        in_window = len(self._window.offsets) if self._window else 0
        in_snapshots = self._snapshots.offsets
        return in_window + in_snapshots + len(self._finalized)

    @property
    def backlogged(self) -> bool:
        """Too much unpushed work to take more: the FIFO stops reading until a push succeeds."""
        pending_bytes = sum(p.plan.size for p in self._pending)
        return len(self._pending) >= MAX_PENDING_COMMITS or pending_bytes >= 4 * self._size_cap

    def next_deadline(self) -> float | None:
        """When `tick` next has something to do (window silence or a due push)."""
        window_deadline = self._window.deadline if self._window is not None else None
        deadlines = [d for d in (window_deadline, self._push_due) if d is not None]
        return min(deadlines) if deadlines else None

    def _settle(self, offsets: list[Offset]) -> None:
        if offsets:
            self._on_settled(offsets)
        metrics.PENDING.labels(*self._labels).set(self.unsettled)

    def _settle_finalized(self) -> None:
        done, self._finalized = self._finalized, []
        states, self._finalized_states = self._finalized_states, []
        self._emit(states)
        self._settle(done)

    def _emit(self, states: list[PendingRecord]) -> None:
        """Hand object-state records to the sink, always before the offsets that produced them settle."""
        if states and self._on_state is not None:
            self._on_state(states)

    # sync ----------------------------------------------------------------------------------
    async def sync(self) -> None:
        """Fetch the remote and base the branch on its tip (or the default branch, or nothing)."""
        await self.repo.fetch()
        remote = self.repo.remote_ref(self.branch)
        base = remote
        if base is None and self.branch != self.provider.default_branch:
            base = self.repo.remote_ref(self.provider.default_branch)
        self._remote_tip = remote
        self._reset(base)
        ends = await self._log_ends() if self._log_ends is not None else None
        self._skip = self._committed_offsets(remote, ends) if remote else {}
        await self._recall_versions()
        if self._on_state is not None and self._load_state is not None:
            self._book = StateBook(await self._load_state(self._own_targets()))
        self.synced = True
        logger.info(
            "%s %s: based on %s, work already committed up to %s",
            redact_url(self.provider.url),
            self.branch,
            base or "an empty history",
            self._skip or "nothing",
        )

    def _tracked(self, item: WorkItem) -> StateBook | None:
        """The state book when `item`'s target is configured on this branch (work routed here under
        an older configuration must not describe the target's current branch)."""
        if self._book is None or item.target not in self._own_targets():
            return None
        return self._book

    async def _recall_versions(self) -> None:
        """Seed the version ledger from the work the branch tip already carries.

        A new owner (after a failover) must not write an older version that the previous owner
        already replaced; the records just before the tip's offset say which versions it wrote.
        """
        if self._history is None:
            return
        for partition, offset in self._skip.items():
            for item in await self._history(partition, offset):
                if (item.provider, item.branch) != (self.provider.name, self.branch):
                    continue
                body = item.body
                if isinstance(body, Write):
                    self._recall(item, body.namespace, body.name, body.resource_version, body.uid)
                elif isinstance(body, ResyncChunk):
                    for obj in body.objects:
                        self._recall(item, obj.namespace, obj.name, obj.resource_version, obj.uid)

    def _recall(self, item: WorkItem, namespace: str, name: str, version: str, uid: str) -> None:
        try:
            folder = normalize_target_path(item.path)
            path = canonical_path(folder, item.group, item.resource, namespace, name)
        except LayoutError:
            return
        self.versions.applied(path, version, uid)

    def _own_targets(self) -> frozenset[str]:
        return frozenset(
            t.name
            for t in self._targets.values()
            if t.provider == self.provider.name and (t.branch or self.provider.default_branch) == self.branch
        )

    def _reset(self, base: str | None) -> None:
        self._tip = base
        self._tree = self.repo.tree(base)
        if base is not None:
            self.repo.set_branch(self.branch, base)

    def _committed_offsets(self, tip: str, ends: Mapping[int, int] | None) -> dict[int, int]:
        """The newest `Reverser-Offset` this FIFO left on the branch, walking first parents.

        A trailer somebody else could have written (see `trusted_offset`) is logged and passed over.
        """
        own = identity_line(self.committer)
        sha: str | None = tip
        for _ in range(TRAILER_SCAN_COMMITS):
            if sha is None:
                break
            info = self.repo.read_commit(sha)
            found, untrusted = trusted_offset(
                info.trailers(), info.committer, own, self.provider.name, self.branch, ends
            )
            if found is not None:
                return {found[0]: found[1]}
            if untrusted is not None:
                logger.warning(
                    "%s %s: ignoring the Reverser-Offset trailer of commit %s: %s",
                    self.provider.name,
                    self.branch,
                    sha,
                    untrusted,
                )
            sha = info.parents[0] if info.parents else None
        return {}

    # work ----------------------------------------------------------------------------------
    async def handle(self, item: WorkItem) -> None:
        """Apply one work record (the caller keeps log order and calls `sync` first)."""
        here = (item.partition, item.offset)
        # a late author makes no commit, so no trailer covers it; noting it again changes nothing
        redelivered = item.offset <= self._skip.get(item.partition, -1)
        if redelivered and not isinstance(item.body, LateAuthor):
            metrics.SKIPPED.labels(metrics.SkipReason.ALREADY_COMMITTED).inc()
            if isinstance(item.body, TargetDeleted):
                self._retiring.discard(item.target)
                self._deleted.add(item.target)
            if isinstance(item.body, CommitRequested) and self._remote_tip is not None:
                commits = flush.first_parents(self.repo.read_commit, self._remote_tip)
                await self._requests.redelivered(commits, item, item.body)
            self._emit(self._redelivered_state(item))
            self._settle([here])
            return
        body = item.body
        if not isinstance(body, TargetDeleted) and await self._gone(item):
            metrics.SKIPPED.labels(metrics.SkipReason.DELETED_TARGET).inc()
            self._settle([here])
            return
        if isinstance(body, TargetDeleted):
            await self._retire(item, body)
        elif isinstance(body, CommitRequested):
            action = await self._requests.take(self._window, item, body)
            if action is flush.FlushAction.CLOSE_NOW:
                await self._finalize(CloseReason.COMMIT_REQUEST)
            elif action is flush.FlushAction.NOTHING:
                self._settle([here])
        elif isinstance(body, Write):
            if item.observed_at_ms:
                delay_s = self._wall() - item.observed_at_ms / 1000
                metrics.RECEIVE_DELAY_SECONDS.labels(*self._labels).observe(max(delay_s, 0.0))
            await self._write(item, body)
        elif isinstance(body, ResyncBegin):
            self._begin(item, body)
        elif isinstance(body, ResyncChunk):
            self._chunk(item, body)
        elif isinstance(body, LateAuthor):
            await self._late_author(item, body)
        else:
            await self._end(item, body)
        metrics.PENDING.labels(*self._labels).set(self.unsettled)

    async def _gone(self, item: WorkItem) -> bool:
        """Whether `item` belongs to a target already deleted at its place in the log.

        A target the configuration lacks was deleted (or never configured). Its records before its
        `TargetDeleted` were routed while it existed and are written; those after it are late
        (a stream still stopping) and skipped. Which side a record is on is read from the log,
        not remembered: after a restart the `TargetDeleted` may be behind the committed offset,
        so the FIFO asks once per target whether one still follows this record on the partition.
        """
        if item.target in self._targets:
            return False
        if item.target in self._deleted:
            return True
        if self._deletion_ahead is None or item.target in self._retiring:
            return False
        if await self._deletion_ahead(item):
            self._retiring.add(item.target)
            return False
        logger.warning(
            "%s %s: target %s is not in the configuration and no TargetDeleted of it follows "
            "offset %d:%d on the log: its records are skipped",
            self.provider.name,
            self.branch,
            item.target,
            item.partition,
            item.offset,
        )
        self._deleted.add(item.target)
        return True

    # late authors (pipeline.commit.notes) ----------------------------------------------------
    async def _late_author(self, item: WorkItem, body: LateAuthor) -> None:
        """A late fact named an unresolved change's author: note it once its commit is pushed."""
        if self._window is not None and (body.work_partition, body.work_offset) in self._window.offsets:
            await self._finalize(CloseReason.LATE_AUTHOR)
        self._late.add(item, body)
        if self._pending:
            self._schedule_push()
        else:
            await self._flush_late()

    async def _flush_late(self) -> None:
        """Note the waiting late authors on the pushed history; a failure retries at the next push."""
        try:
            done, states = await self._late.flush(
                self._remote_tip, self._tree, self._book, self._sealed, int(self._wall() * 1000)
            )
        except GitRemoteError as exc:
            await self._push_failed(exc)
            return
        self._emit(states)
        self._settle(done)

    def _sealed(self, item: WorkItem) -> bool:
        return is_sensitive(item.group, item.resource, self._sensitive(self._target(item.target)))

    # object state ----------------------------------------------------------------------------
    def _state_of(
        self,
        item: WorkItem,
        namespace: str,
        name: str,
        uid: str,
        version: str,
        content: bytes,
        sealed: bool,
        author: WorkAuthor,
        document: bytes | None = None,
    ) -> ObjectState:
        """The state record; `document` is the rendered file as committed (rendered here when None)."""
        if sealed:
            document = b""
        elif document is None:
            try:
                document = render_object(parse_object_json(content))
            except RenderError:
                document = b""
        return ObjectState(
            target=item.target,
            provider=self.provider.name,
            branch=self.branch,
            path=item.path,
            cluster=item.cluster,
            group=item.group,
            version=item.version,
            resource=item.resource,
            namespace=namespace,
            name=name,
            uid=uid,
            resource_version=version,
            object_json=content,
            sealed=sealed,
            document=document,
            author=author,
            partition=item.partition,
            offset=item.offset,
            committed_at_ms=int(self._wall() * 1000),
        )

    def _write_state(
        self, item: WorkItem, write: Write, sealed: bool, document: bytes | None = None
    ) -> PendingRecord | None:
        """The object-state record a committed `Write` implies (None: the topic has it already)."""
        book = self._tracked(item)
        if book is None:
            return None
        if write.operation == "DELETE":
            key = ObjectKey(item.target, item.group, item.resource, write.namespace, write.name)
            return book.remove(key, (item.partition, item.offset))
        state = self._state_of(
            item,
            write.namespace,
            write.name,
            write.uid,
            write.resource_version,
            write.object_json or b"null",
            sealed,
            write.author,
            document,
        )
        return book.upsert(state)

    def _redelivered_state(self, item: WorkItem) -> list[PendingRecord]:
        """Object state of work the branch already carries: written again unless the topic has it.

        Covers a crash after the push and before the object-state append; snapshot sweeps of such
        work are not re-derived (the next snapshot removes those objects; docs/commit-worker.md).
        """
        book = self._tracked(item)
        if book is None:
            return []
        target = self._target(item.target)
        sealed = is_sensitive(item.group, item.resource, self._sensitive(target))
        body = item.body
        found: list[PendingRecord | None] = []
        if isinstance(body, Write):
            if body.operation == "DELETE" and (target is None or target.prune == "Never"):
                return []
            found.append(self._write_state(item, body, sealed))
        elif isinstance(body, ResyncChunk):
            found += [
                book.upsert(
                    self._state_of(
                        item,
                        o.namespace,
                        o.name,
                        o.uid,
                        o.resource_version,
                        o.object_json,
                        sealed,
                        SNAPSHOT_AUTHOR,
                    )
                )
                for o in body.objects
            ]
        return [r for r in found if r is not None]

    def update_targets(self, settings: Settings) -> None:
        """A changed configuration's targets apply from the next record on (a removed target's
        records before its `TargetDeleted` are then written with prune `Never`, those after it
        are skipped: see `_gone`)."""
        self._targets = {t.name: t for t in settings.targets}
        self._rules = {}
        # a target configured again is written again; if it goes, the log decides anew
        self._deleted -= set(self._targets)
        self._retiring -= set(self._targets)

    def _target(self, name: str) -> TargetSettings | None:
        return self._targets.get(name)

    def _operations(self, item: WorkItem, scope: str) -> frozenset[str]:
        """The changes (CREATE, UPDATE, DELETE) the target's rules let reach Git for the item's type
        in `scope` (`pipeline.targetrules`); all for a target this configuration does not have."""
        target = self._target(item.target)
        if target is None:
            return ALL_OPERATIONS
        rules = self._rules.get(target.name)
        if rules is None:
            try:
                rules = self._rules[target.name] = TargetRules.of(target)
            except SelectorError:
                return ALL_OPERATIONS
        return rules.operations(GroupResource(item.group, item.resource), scope)

    def _filtered(self, item: WorkItem, operation: str, scope: str) -> bool:
        """Whether the rules keep `operation` of this item's type in `scope` from Git."""
        return operation not in self._operations(item, scope)

    def _bad(self, item: WorkItem, reason: metrics.SkipReason, problem: Exception) -> None:
        logger.warning(
            "branch work %d:%d for %s/%s skipped: %s",
            item.partition,
            item.offset,
            self.provider.name,
            self.branch,
            problem,
        )
        metrics.SKIPPED.labels(reason).inc()

    def _sensitive(self, target: TargetSettings | None) -> frozenset[GroupResource]:
        """The target's extra sensitive types (Secrets always are)."""
        if target is None or target.encryption is None:
            return frozenset()
        return sensitive_set(target.encryption.sensitive_resources)

    def _sealed_content(self, item: WorkItem, namespace: str, name: str, content: bytes) -> bytes | None:
        """A sensitive object's content if it is a SOPS document plaintext only where it may be, else None.

        The watch stage seals sensitive objects of targets with encryption; anything else (no
        encryption configured, a plaintext record, a document with a plaintext field outside the
        readable ones of `pipeline.sealing.readable`) is refused here so it never reaches Git.
        """
        try:
            SealedDocument.parse(content)
        except PlaintextFieldError as exc:
            logger.warning(
                "branch work %d:%d: %s %s/%s not written: the sealed document is refused (%s); "
                "see docs/secrets.md",
                item.partition,
                item.offset,
                item.resource,
                namespace,
                name,
                exc,
            )
            metrics.SKIPPED.labels(metrics.SkipReason.SEALED_PLAINTEXT).inc()
            return None
        except SealedDocumentError as exc:
            logger.warning(
                "branch work %d:%d: %s %s/%s not written: sensitive content must be SOPS-encrypted (%s); "
                "configure targets[].encryption",
                item.partition,
                item.offset,
                item.resource,
                namespace,
                name,
                exc,
            )
            metrics.SKIPPED.labels(metrics.SkipReason.SENSITIVE_UNENCRYPTED).inc()
            return None
        return content

    async def _write(self, item: WorkItem, write: Write) -> None:
        here = (item.partition, item.offset)
        target = self._target(item.target)
        prune = target.prune if target is not None else "Never"
        deleting = write.operation == "DELETE"
        sensitive = self._sensitive(target)
        sealed = is_sensitive(item.group, item.resource, sensitive)
        content: bytes | None = None
        try:
            path = canonical_path(
                normalize_target_path(item.path),
                item.group,
                item.resource,
                write.namespace,
                write.name,
                sensitive,
            )
            if not deleting and not sealed:
                content = render_object(parse_object_json(write.object_json or b"null"))
        except (LayoutError, RenderError) as exc:
            self._bad(item, metrics.SkipReason.BAD_RECORD, exc)
            if self._reject is not None:
                await self._reject(item, exc)
            self._settle([here])
            return
        if deleting and prune == "Never":
            metrics.SKIPPED.labels(metrics.SkipReason.PRUNE_NEVER).inc()
            self._settle([here])
            return
        if self._filtered(item, write.operation, write.namespace):
            metrics.SKIPPED.labels(metrics.SkipReason.OPERATION_FILTERED).inc()
            self._settle([here])
            return
        if not deleting and sealed:
            content = self._sealed_content(item, write.namespace, write.name, write.object_json or b"")
            if content is None:
                self._settle([here])
                return
        if self.versions.is_older(path, write.resource_version):
            self._skip_older(item, path, write.resource_version)
            self._settle([here])
            return
        self.versions.applied(path, write.resource_version, write.uid)
        window_s, max_age_s = window_limits_s(self.provider, target)
        open_window = self._window
        made_ms = event_time_ms(write.author, item.observed_at_ms)
        if open_window is not None and open_window.apart_from(made_ms):
            await self._finalize(CloseReason.SILENCE)
        elif open_window is not None and open_window.aged_before(made_ms):
            await self._finalize(CloseReason.MAX_AGE)
        elif open_window is not None and open_window.request_due(made_ms):
            await self._finalize(CloseReason.COMMIT_REQUEST)
        key = CommitWindow.key_of(write.author, item.target)
        if self._window is not None and self._window.key != key:
            await self._finalize(CloseReason.AUTHOR_CHANGE)
        if self._window is None:
            self._window = CommitWindow(
                key,
                write.author,
                item.target,
                deadline=0.0,
                silence_s=window_s,
                max_age_s=max_age_s,
                opened_at=self._clock(),
            )
        obj = ChangedObject(
            write.operation, item.group, item.version, item.resource, write.namespace, write.name
        )
        window = self._window
        window.add(path, content, obj, write.author, item.partition, item.offset, item.observed_at_ms)
        state = self._write_state(item, write, sealed, content)
        if state is not None:
            self._window_states.append(state)
        if window.size >= self._size_cap:
            await self._finalize(CloseReason.SIZE_CAP)
        elif window_s <= 0:
            await self._finalize(CloseReason.WINDOW_ZERO)
        else:
            window.touch(self._clock())

    def _skip_older(self, item: WorkItem, path: str, version: str) -> None:
        logger.info(
            "branch work %d:%d: %s at resourceVersion %s is older than the version already applied; skipped",
            item.partition,
            item.offset,
            path,
            version,
        )
        metrics.SKIPPED.labels(metrics.SkipReason.OLDER_VERSION).inc()

    def _skip_snapshot(self, skipped: Skipped | None) -> None:
        """Settle snapshot records that end without a commit, counted by why (`SnapshotBook`)."""
        if skipped is None:
            return
        if skipped.reason is metrics.SkipReason.INCOMPLETE_SNAPSHOT:
            logger.warning("%s", skipped.detail)
        elif skipped.detail:
            logger.info("%s", skipped.detail)
        metrics.SKIPPED.labels(skipped.reason).inc(len(skipped.offsets))
        self._settle(skipped.offsets)

    def _begin(self, item: WorkItem, body: ResyncBegin) -> None:
        self._skip_snapshot(self._snapshots.begin(item, body))

    def _chunk(self, item: WorkItem, body: ResyncChunk) -> None:
        self._skip_snapshot(self._snapshots.chunk(item, body))

    async def _end(self, item: WorkItem, body: ResyncEnd) -> None:
        outcome = self._snapshots.end(item, body)
        if isinstance(outcome, Skipped):
            self._skip_snapshot(outcome)
            return
        await self._finalize(CloseReason.SNAPSHOT)
        plan = self._snapshot_plan(outcome.snapshot, item, body)
        await self._delete_absent(plan, item, body)
        await self._commit(plan, outcome.offsets)

    async def _delete_absent(self, snapshot: Plan, end: WorkItem, body: ResyncEnd) -> None:
        """Under `OnEvent`, delete what this pipeline wrote and the snapshot no longer lists.

        Such an object was deleted between the stream's cursor and the snapshot, so no watch event
        carried its delete. Each deletion is committed like a watch DELETE, before the snapshot's
        own commit and in the same push: under the author the router's deletion evidence names for
        the file's object (matched by uid, or by name for a name-keyed delete), else unknown. Files
        this pipeline did not write (foreign files) are kept, as the prune matrix says
        (docs/commit-worker.md). They carry no offsets: the snapshot's commit settles the records.
        """
        target = self._target(end.target)
        sweep = snapshot.sweep
        if sweep is None or target is None or target.prune != "OnEvent":
            return
        if self._filtered(end, "DELETE", end.scope):
            return
        evidence = body.removals or ()
        by_uid = {r.uid: r.author for r in evidence if r.uid}
        by_name = {(r.namespace, r.name): r.author for r in evidence if not r.uid}
        fallback = NOT_ATTEMPTED if body.removals is None else WorkAuthor(Outcome.UNRESOLVED)
        windows: dict[WorkAuthor, CommitWindow] = {}
        states: dict[WorkAuthor, list[PendingRecord]] = {}
        book = self._tracked(end)
        for path in orphans(self._tree, sweep):
            if not await self._written_here(path):
                continue
            namespace, name = object_of(path, sweep.target_path)
            author = by_uid.get(self.versions.uid_of(path)) or by_name.get((namespace, name)) or fallback
            window = windows.get(author)
            if window is None:
                window = windows[author] = CommitWindow(
                    CommitWindow.key_of(author, end.target),
                    author,
                    end.target,
                    deadline=0.0,
                    silence_s=0.0,
                    max_age_s=0.0,
                )
            obj = ChangedObject("DELETE", end.group, end.version, end.resource, namespace, name)
            window.add(path, None, obj, author, end.partition, end.offset, end.observed_at_ms)
            self.versions.applied(path, snapshot.revision)
            state_key = ObjectKey(end.target, end.group, end.resource, namespace, name)
            if book is not None and (tombstone := book.remove(state_key, (end.partition, end.offset))):
                states.setdefault(author, []).append(tombstone)
            metrics.SNAPSHOT_DELETES.labels(end.target, author_kind(author.outcome, author.username)).inc()
        for author, window in windows.items():
            await self._commit(self._window_plan(window, states.get(author, [])), [])

    async def _written_here(self, path: str) -> bool:
        """Whether this pipeline wrote the file: its own work at `path`, or its commit changed it last.

        The version ledger knows every path this worker applied or recalled from the branch's work;
        beyond it, the newest commit that touched the path on the remote must be the worker's own
        (its committer and this branch's `Reverser-Branch`/`Reverser-Offset` trailers).
        """
        if self.versions.knows(path):
            return True
        if self._remote_tip is None:
            return False
        sha = await self.repo.last_commit_touching(self._remote_tip, path)
        if sha is None:
            return False
        info = self.repo.read_commit(sha)
        own = info.committer == identity_line(self.committer)
        return own and parse_offset(info.trailers(), self.provider.name, self.branch) is not None

    def _snapshot_plan(self, snapshot: Collected, end: WorkItem, body: ResyncEnd) -> Plan:
        target = self._target(end.target)
        target_path = normalize_target_path(end.path)
        sensitive = self._sensitive(target)
        sealed = is_sensitive(end.group, end.resource, sensitive)
        writes: dict[str, tuple[bytes | None, ChangedObject]] = {}
        states: list[PendingRecord] = []
        book = self._tracked(end)
        keep: set[str] = set()
        for obj in snapshot.objects:
            try:
                path = canonical_path(
                    target_path, end.group, end.resource, obj.namespace, obj.name, sensitive
                )
            except LayoutError as exc:
                self._bad(end, metrics.SkipReason.BAD_RECORD, exc)
                continue
            keep.add(path)
            # a listed object adds a file (CREATE) or changes one (UPDATE), as its event would
            operation = "CREATE" if self._tree.get(path) is None else "UPDATE"
            if self._filtered(end, operation, obj.namespace):
                continue
            if self.versions.is_older(path, obj.resource_version):
                self._skip_older(end, path, obj.resource_version)
                continue
            if sealed:
                content = self._sealed_content(end, obj.namespace, obj.name, obj.object_json)
                if content is None:
                    continue
            else:
                try:
                    content = render_object(parse_object_json(obj.object_json))
                except RenderError as exc:
                    self._bad(end, metrics.SkipReason.BAD_RECORD, exc)
                    continue
            self.versions.applied(path, obj.resource_version, obj.uid)
            if book is not None:
                state = book.upsert(
                    self._state_of(
                        end,
                        obj.namespace,
                        obj.name,
                        obj.uid,
                        obj.resource_version,
                        obj.object_json,
                        sealed,
                        SNAPSHOT_AUTHOR,
                        content,
                    )
                )
                if state is not None:
                    states.append(state)
            writes[path] = (
                content,
                ChangedObject("UPDATE", end.group, end.version, end.resource, obj.namespace, obj.name),
            )
        opened = snapshot.begin.body
        revision = body.resource_version or (
            opened.resource_version if isinstance(opened, ResyncBegin) else ""
        )
        # objects written after the list's revision are not in it, and must not be swept
        keep |= self.versions.newer_than(revision)
        prune = target is not None and target.prune == "Always"
        prune = prune and not self._filtered(end, "DELETE", end.scope)
        if prune and book is not None:
            states += self._swept_states(book, end, target_path, sensitive, frozenset(keep))
        return Plan(
            kind="snapshot",
            provider=self.provider.name,
            branch=self.branch,
            target=end.target,
            author=self.committer,
            author_kind="committer",
            author_label=self.committer.name,
            attributions=[],
            author_time_s=(end.observed_at_ms // 1000) or int(self._wall()),
            partition=end.partition,
            offset=end.offset,
            observed_at_ms=snapshot.begin.observed_at_ms,
            writes=writes,
            sweep=Sweep(
                target_path,
                end.group,
                end.resource,
                end.scope,
                frozenset(keep),
                prune=prune,
            ),
            states=states,
            resource=end.resource,
            revision=revision,
            size=sum(len(c) for c, _ in writes.values() if c is not None),
            template=target.commit_message if target is not None else None,
        )

    def _swept_states(
        self,
        book: StateBook,
        end: WorkItem,
        target_path: str,
        sensitive: frozenset[GroupResource],
        keep: frozenset[str],
    ) -> list[PendingRecord]:
        """Tombstones for the objects of a snapshot's scope that the snapshot no longer lists."""
        scope = end.scope or None
        found: list[PendingRecord] = []
        for key in list(book.live_keys(end.target, end.group, end.resource, scope)):
            try:
                path = canonical_path(
                    target_path, key.group, key.resource, key.namespace, key.name, sensitive
                )
            except LayoutError:
                continue
            if path not in keep and (tombstone := book.remove(key, (end.partition, end.offset))):
                found.append(tombstone)
        return found

    async def _retire(self, item: WorkItem, body: TargetDeleted) -> None:
        """A deleted target: its unfinished snapshots end, and under `remove_files` its documents go.

        The removal is one commit by the committer that claims this record's offset (so a
        redelivery finds it done); the open window is committed first, because that trailer
        claims every earlier offset of the partition.
        """
        here = (item.partition, item.offset)
        self._retiring.discard(item.target)
        self._deleted.add(item.target)
        self._skip_snapshot(self._snapshots.drop_target(item.target))
        await self._finalize(CloseReason.TARGET_DELETED)
        folder = normalize_target_path(item.path)
        gone = documents(self._tree, folder) if body.remove_files else []
        logger.info(
            "%s %s: target %s deleted (%s, prune %s): %s",
            self.provider.name,
            self.branch,
            item.target,
            body.reason,
            body.prune,
            f"removing {len(gone)} document(s) under {folder or '.'}/" if body.remove_files else "files kept",
        )
        states: list[PendingRecord] = []
        if body.remove_files and self._book is not None:
            for key in list(self._book.target_keys(item.target)):
                if tombstone := self._book.remove(key, here):
                    states.append(tombstone)
        plan = Plan(
            kind="retire",
            provider=self.provider.name,
            branch=self.branch,
            target=item.target,
            author=self.committer,
            author_kind="committer",
            author_label=self.committer.name,
            attributions=[],
            author_time_s=(item.observed_at_ms // 1000) or int(self._wall()),
            partition=item.partition,
            offset=item.offset,
            observed_at_ms=item.observed_at_ms,
            writes={p: (None, ChangedObject("DELETE", "", "", "", "", p)) for p in gone},
            states=states,
            retired=Retired(folder, body.prune, body.reason),
        )
        await self._commit(plan, [here])

    async def remove_unlisted(self, target: TargetSettings) -> None:
        """Delete the documents under `target`'s folder that the state book does not hold.

        For a history replay into a branch that had content: what the replayed work leaves is in
        the book, anything else in the folder is gone from the cluster (or never was in it).
        """
        if self._book is None:
            return
        folder = normalize_target_path(target.path)
        sensitive = self._sensitive(target)
        keep: set[str] = set()
        for key in self._book.target_keys(target.name):
            with contextlib.suppress(LayoutError):
                keep.add(canonical_path(folder, key.group, key.resource, key.namespace, key.name, sensitive))
        gone = [p for p in documents(self._tree, folder) if p not in keep]
        if not gone:
            return
        await self._finalize(CloseReason.SHUTDOWN)
        plan = Plan(
            kind="rebuild",
            provider=self.provider.name,
            branch=self.branch,
            target=target.name,
            author=self.committer,
            author_kind="committer",
            author_label=self.committer.name,
            attributions=[],
            author_time_s=int(self._wall()),
            partition=0,
            offset=0,
            observed_at_ms=0,
            writes={p: (None, ChangedObject("DELETE", "", "", "", "", p)) for p in gone},
            resource="history",
        )
        await self._commit(plan, [])

    # windows and commits -------------------------------------------------------------------
    async def _finalize(self, reason: str) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        metrics.WINDOW_CLOSES.labels(*self._labels, reason).inc()
        plan = self._window_plan(window, self._window_states)
        self._window_states = []
        await self._commit(plan, window.offsets)

    def _window_plan(self, window: CommitWindow, states: list[PendingRecord]) -> Plan:
        """The commit of a closed window: its author (or unknown, or the committer), writes and states."""
        author = window.author
        identity = author_identity(
            author.outcome, author.username, author.display_name, author.email, self.committer
        )
        kind = author_kind(author.outcome, author.username)
        if kind == "committer":
            label = self.committer.name
        elif kind == "unresolved":
            label = UNRESOLVED.name
        else:
            label = author.username
        return Plan(
            kind="window",
            provider=self.provider.name,
            branch=self.branch,
            target=window.target,
            author=identity,
            author_kind=kind,
            author_label=label,
            attributions=window.tiers,
            author_time_s=(window.last_observed_ms // 1000) or int(self._wall()),
            partition=window.offsets[-1][0],
            offset=window.offsets[-1][1],
            observed_at_ms=window.first_observed_ms,
            writes=window.writes,
            size=window.size,
            template=flush.request_template(window)
            or (target.commit_message if (target := self._target(window.target)) else None),
            states=states,
            requests=tuple(window.requests),
        )

    def _add_sops_rules(self, plan: Plan, applied: Applied) -> None:
        """The target folder's `.sops.yaml` with its age recipients, in the commit that first
        writes an encrypted file there (`pipeline.sealing.sopsrules`); never over an existing one."""
        target = self._target(plan.target)
        encryption = target.encryption if target is not None else None
        if target is None or encryption is None or encryption.sops_config is not None or not applied.changed:
            return
        if not encryption.age_recipients or not any(
            content is not None and is_sealed_path(path) for path, (content, _) in plan.writes.items()
        ):
            return
        path = sops_rules_path(normalize_target_path(target.path))
        if self._tree.get(path) is not None:
            return
        content = sops_rules(encryption.age_recipients)
        try:
            self._tree.put(path, blob_sha(content))
        except IsADirectoryError:
            return
        self.repo.store_blob(content)
        applied.paths.append(f"create {path}")

    def _make_commit(self, plan: Plan) -> str | None:
        applied = apply_plan(self._tree, plan, self.repo.store_blob, self.repo.objects.read)
        self._add_sops_rules(plan, applied)
        for path in applied.refused:
            logger.warning(
                "%s %s: cannot write %s over a folder; skipped", self.provider.name, self.branch, path
            )
            metrics.SKIPPED.labels(metrics.SkipReason.PATH_CONFLICT).inc()
        if plan.sweep is not None:
            if applied.retained:
                metrics.RETAINED.labels(plan.target, "Always" if plan.sweep.prune else "OnEvent").inc(
                    applied.retained
                )
            if applied.swept:
                metrics.SWEEP_DELETES.labels(plan.target, plan.sweep.group, plan.sweep.resource).inc(
                    applied.swept
                )
        if not applied.changed:
            return None
        tree = self._tree.write()
        sha = self.repo.commit(
            tree,
            self._tip,
            plan.author,
            plan.author_time_s,
            self.committer,
            int(self._wall()),
            message_for(plan, applied),
        )
        self._tip = sha
        return sha

    async def _commit(self, plan: Plan, offsets: list[Offset]) -> None:
        sha = self._make_commit(plan)
        self._finalized.extend(offsets)
        self._finalized_states.extend(plan.states)
        if sha is None:
            await self._requests.unchanged(plan.target, plan.requests)
            if not self._pending:
                self._settle_finalized()
            return
        self._pending.append(_Pending(plan, sha))
        metrics.COMMITS.labels(*self._labels, plan.author_kind).inc()
        if self._hook is not None:
            await self._hook("committed")
        self._schedule_push()

    # push ----------------------------------------------------------------------------------
    def _schedule_push(self) -> None:
        if not self._pending or self._push_due is not None:
            return
        self._push_due = push_due_at(self._clock(), self._last_push, self.provider.push_cooldown_s)

    async def tick(self, idle: bool = True) -> None:
        """Close a silent window and run a due push.

        Silence on the clock only counts when no work is queued (`idle`): with a backlog the
        records' own observation times decide, so a replay groups windows exactly as live did.
        """
        now = self._clock()
        if idle and self._window is not None and now >= self._window.deadline:
            await self._finalize(self._window.clock_close_reason(now))
        if self._push_due is not None and now >= self._push_due and self._push_now(now, idle):
            await self.push()

    def _push_now(self, now: float, idle: bool) -> bool:
        """Whether a due push goes now: a backlog being worked through is pushed once it is drained.

        Pushing the first finished window of a backlog (after a restart, a failover, an outage)
        would make the rest wait a full cooldown behind it. A due push therefore waits while work
        is queued, but no longer than one more cooldown, and not while unpushed work is at its bound.
        """
        assert self._push_due is not None
        return idle or self.backlogged or now >= self._push_due + self.provider.push_cooldown_s

    async def push(self) -> bool:
        """Push unpushed commits with a lease on the remote tip, replaying them after a conflict."""
        self._push_due = None
        if not self._pending:
            if self._late.waiting:
                await self._flush_late()
            return True
        for _ in range(PUSH_ATTEMPTS):
            assert self._tip is not None
            started = self._clock()
            await asyncio.to_thread(self.repo.set_branch, self.branch, self._tip)
            try:
                await self.repo.push(self.branch, self._tip, self._remote_tip)
            except PushRejected as exc:
                metrics.PUSHES.labels(*self._labels, metrics.PushResult.REJECTED).inc()
                logger.info("%s; fetching and replaying %d commit(s)", exc, len(self._pending))
                try:
                    await self._replay_onto_remote()
                except GitRemoteError as fetch_error:
                    await self._push_failed(fetch_error)
                    return False
                if not self._pending:
                    self._settle_finalized()
                    return True
                continue
            except GitRemoteError as exc:
                metrics.PUSHES.labels(
                    *self._labels, metrics.PushResult.AUTH_ERROR if exc.auth else metrics.PushResult.ERROR
                ).inc()
                await self._push_failed(exc)
                return False
            metrics.PUSH_SECONDS.labels(*self._labels).observe(max(self._clock() - started, 0.0))
            metrics.PUSHES.labels(*self._labels, metrics.PushResult.OK).inc()
            await self._report("Succeeded", "")
            await self._pushed()
            return True
        await self._push_failed(GitRemoteError(f"push still rejected after {PUSH_ATTEMPTS} attempts"))
        return False

    async def _report(self, outcome: str, message: str) -> None:
        """Each target's newest unpushed commit and what the push did with it (best effort)."""
        if self._on_result is None:
            return
        newest = {pending.plan.target: pending.sha for pending in self._pending}
        for target, sha in newest.items():
            result = TargetResult(
                target, self.provider.name, self.branch, sha, outcome, int(self._wall() * 1000), message
            )
            await self._tell(result)
        carried = [(p.plan.target, p.sha, p.plan.requests) for p in self._pending if p.plan.requests]
        await self._requests.pushed(carried, outcome == "Succeeded", message)

    async def _tell(self, result: TargetResult | RequestResult) -> None:
        """Report one result on the log (best effort: a lost report leaves only a status behind)."""
        if self._on_result is None:
            return
        try:
            await self._on_result(result)
        except LogError as exc:
            logger.warning("reporting a result of target %s failed: %s", result.target, exc)

    async def _pushed(self) -> None:
        self._remote_tip = self._tip
        self._last_push = self._clock()
        self._push_backoff.reset()
        now_ms = self._wall() * 1000
        for pending in self._pending:
            if pending.plan.observed_at_ms:
                metrics.END_TO_END_SECONDS.labels(*self._labels).observe(
                    max(now_ms - pending.plan.observed_at_ms, 0.0) / 1000
                )
        self._pending.clear()
        if self._hook is not None:
            await self._hook("pushed")
        self._settle_finalized()
        if self._late.waiting:
            await self._flush_late()

    def _remote_backoff(self) -> Backoff:
        """Pacing of retries against the Git remote: 1 s, doubling to `push_max_backoff_s`."""
        max_s = self.provider.push_max_backoff_s
        return Backoff(min(REMOTE_RETRY_INITIAL_S, max_s), max_s)

    async def _push_failed(self, exc: GitRemoteError) -> None:
        await self._report("Failed", str(exc))
        delay_s = self._push_backoff.next_delay_s()
        logger.error(
            "push of %s %s failed (%d commit(s) kept, retry in %.0f s): %s",
            redact_url(self.provider.url),
            self.branch,
            len(self._pending),
            delay_s,
            exc,
        )
        self._push_due = self._clock() + delay_s

    async def _replay_onto_remote(self) -> None:
        """Fetch the moved tip and re-apply every unpushed plan on top of it (fresh commits)."""
        await self.repo.fetch()
        remote = self.repo.remote_ref(self.branch)
        metrics.REBASES.labels(*self._labels).inc()
        plans = [p.plan for p in self._pending]
        self._pending.clear()
        self.repo.objects.discard()
        self._remote_tip = remote
        base = remote
        if base is None and self.branch != self.provider.default_branch:
            base = self.repo.remote_ref(self.provider.default_branch)
        self._reset(base)
        for plan in plans:
            sha = self._make_commit(plan)
            if sha is not None:
                self._pending.append(_Pending(plan, sha))

    async def stop(self, reason: str = CloseReason.SHUTDOWN) -> bool:
        """Close the open window and push now, ignoring the cooldown; unfinished snapshots are dropped.

        Returns whether everything applied is on the remote. Offsets of dropped snapshots stay
        unsettled, so the next owner reads them again.
        """
        if not self.synced:
            return False
        await self._finalize(reason)
        self._snapshots.clear()
        if not self._pending:
            self._settle_finalized()
            return True
        return await self.push()

    async def run(self, queue: asyncio.Queue[WorkItem], lock: asyncio.Lock) -> None:
        """Serve the FIFO forever: sync (retrying), then items in order and timers in between.

        `lock` is held while an item or timer is applied, so a rebalance can stop the worker only
        between two steps.
        """
        backoff = self._remote_backoff()
        while not self.synced:
            try:
                async with lock:
                    await self.sync()
            except (GitRemoteError, LogError) as exc:
                delay_s = backoff.next_delay_s()
                logger.error("cannot reach %s (retry in %.0f s): %s", self.provider.name, delay_s, exc)
                await asyncio.sleep(delay_s)
        while True:
            item: WorkItem | None
            if self.backlogged:
                deadline = self.next_deadline()
                await asyncio.sleep(max(deadline - self._clock(), 0.001) if deadline is not None else 1.0)
                item = None
            elif not queue.empty():
                item = queue.get_nowait()
            else:
                deadline = self.next_deadline()
                timeout = None if deadline is None else max(deadline - self._clock(), 0.001)
                try:
                    item = await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    item = None
            async with lock:
                if item is not None:
                    await self.handle(item)
                await self.tick(idle=queue.empty())
