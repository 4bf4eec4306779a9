"""One (provider, branch) FIFO: the shell that syncs, commits, pushes and replays.

The worker applies branch work strictly in log order. What each record means for the branch (a
plan, a skip, object-state records) is decided by `pipeline.commit.decide`; this module does the
I/O around those decisions: it fetches the remote, turns plans into commits, pushes them with a
compare-and-swap on the remote tip, replays them after a conflict, and reports. Offsets are
reported as settled only when their effect is on the remote (or proved to change nothing), so
the consumer never commits an offset for work a crash could still lose. Work the branch tip
already carries (by its `Reverser-Offset` trailer) is skipped, so a redelivery never makes a
second commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from pipeline import gcpolicy
from pipeline.backoff import Backoff
from pipeline.codec.branch_work import (
    CommitRequested,
    LateAuthor,
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    TargetDeleted,
    WorkItem,
    Write,
)
from pipeline.codec.commit_request_result import RequestResult
from pipeline.codec.object_state import ObjectKey as StateKey
from pipeline.codec.target_result import PushOutcome, TargetResult
from pipeline.commit import flush, metrics
from pipeline.commit.decide import Decider, Reject, Skip
from pipeline.commit.git.repo import GitRemoteError, LocalRepo, PushRejected, Signature, identity_line
from pipeline.commit.homes import BranchHomes
from pipeline.commit.inplace import LiveChange, place
from pipeline.commit.kustomize import RenderCheck
from pipeline.commit.layout import is_sealed_path, is_sensitive, normalize_target_path
from pipeline.commit.messages import names_fifo, trusted_offset
from pipeline.commit.notes import LateAuthors
from pipeline.commit.plan import Applied, Plan, Refused, apply_steps, blob_sha, message_for
from pipeline.commit.ports import BranchPorts
from pipeline.commit.position import Offset
from pipeline.commit.refusals import TargetRefusals, refusal_of
from pipeline.commit.snapshots import Carried, Collected, Skipped, push_due_at
from pipeline.commit.statebook import StateBook
from pipeline.commit.window import CloseReason, CommitWindow
from pipeline.config import KustomizeSettings, ProviderSettings, Settings, TargetSettings
from pipeline.intent.plan import IntentPlan
from pipeline.log.api import LogError, PendingRecord
from pipeline.placement import NO_PLACEMENT, Placement
from pipeline.prune import Prune
from pipeline.redaction import redact_url
from pipeline.sealing.sopsrules import sops_rules, sops_rules_path
from pipeline.slices import Slicer, Steps, finish

__all__ = ["BranchWorker"]

logger = logging.getLogger(__name__)

PUSH_ATTEMPTS = 3
# First wait after a push or sync against the Git remote failed (then doubling, jittered).
REMOTE_RETRY_INITIAL_S = 1.0
MAX_PENDING_COMMITS = 10_000
NO_PORTS = BranchPorts()
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
        ports: BranchPorts = NO_PORTS,
    ) -> None:
        """`on_settled` hears offsets whose effect is on the remote (or that change nothing)."""
        self.provider = provider
        self.branch = branch
        self.repo = repo
        self._on_settled = on_settled
        self._ports = ports
        self._clock = ports.clock
        self._wall = ports.wall
        # work that grows with a snapshot or the branch (plan, apply, index, reading the branch at
        # sync) runs in slices, so the loop the whole process shares is never held for long
        self._slicer = Slicer(ports.slice_ms)
        self._decide = Decider(settings, provider, branch, ports.wall)
        self.committer = self._decide.committer
        self.versions = self._decide.versions
        self._late = LateAuthors(repo, provider.name, branch, self.committer)
        self._finalized_states: list[PendingRecord] = []
        # targets the configuration lacks whose deletion is behind this FIFO's position (applied
        # here, or found missing ahead on the log): their records are skipped (`_gone`)
        self._deleted: set[str] = set()
        # targets the configuration lacks whose `TargetDeleted` is still ahead on the log
        self._retiring: set[str] = set()
        self.synced = False
        self._remote_tip: str | None = None
        self._tip: str | None = None
        self._tree = repo.tree(None)
        # where each object lives in the target folders (homes.py), kept with `_tree`
        self._homes = BranchHomes()
        self._skip: dict[int, int] = {}
        self._pending: list[_Pending] = []
        # refused changes standing per target, reported with its results (GitTarget `Stalled`)
        self._refusals = TargetRefusals()
        self._finalized: list[Offset] = []
        self._push_due: float | None = None
        self._last_push: float | None = None
        self._push_backoff = self._remote_backoff()
        self._labels = (provider.name, branch)
        self._requests = flush.RequestDesk(provider.name, branch, self._tell, ports.clock, ports.wall)

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
        return self._decide.window

    @property
    def unsettled(self) -> int:
        """Work records received but not yet settled (the pending-work gauge)."""
        window = self._decide.window
        in_window = len(window.offsets) if window else 0
        return in_window + self._decide.snapshots.offsets + len(self._finalized)

    @property
    def backlogged(self) -> bool:
        """Too much unpushed work to take more: the FIFO stops reading until a push succeeds."""
        pending_bytes = sum(p.plan.size for p in self._pending)
        return (
            len(self._pending) >= MAX_PENDING_COMMITS or pending_bytes >= 4 * self.provider.window_max_bytes
        )

    def next_deadline(self) -> float | None:
        """When `tick` next has something to do (window silence or a due push)."""
        window = self._decide.window
        window_deadline = window.deadline if window is not None else None
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
        if states and self._ports.on_state is not None:
            self._ports.on_state(states)

    # sync ----------------------------------------------------------------------------------
    async def sync(self) -> None:
        """Fetch the remote and base the branch on its tip (or the default branch, or nothing).

        The home index it builds lives as long as the branch: it leaves the garbage collector's
        walks as it is built (`gcpolicy.long_lived`).
        """
        with gcpolicy.long_lived():
            await self._sync()

    async def _sync(self) -> None:
        ports = self._ports
        await self.repo.fetch()
        remote = self.repo.remote_ref(self.branch)
        base = remote
        if base is None and self.branch != self.provider.default_branch:
            base = self.repo.remote_ref(self.provider.default_branch)
        self._remote_tip = remote
        await self._reset(base)
        ends = await ports.log_ends() if ports.log_ends is not None else None
        self._skip = self._committed_offsets(remote, ends) if remote else {}
        await self._recall_versions()
        if ports.on_state is not None and ports.load_state is not None:
            states = await ports.load_state(self._decide.own_targets())
            self._decide.book = StateBook(states)
            await self._slicer.drive(self._decide.remember_states(states, self._homes))
        self.synced = True
        logger.info(
            "%s %s: based on %s, work already committed up to %s",
            redact_url(self.provider.url),
            self.branch,
            base or "an empty history",
            self._skip or "nothing",
        )

    async def _recall_versions(self) -> None:
        """Seed the version ledger from the work the branch tip already carries.

        A new owner (after a failover) must not write an older version that the previous owner
        already replaced; the records just before the tip's offset say which versions it wrote.
        """
        if self._ports.history is None:
            return
        for partition, offset in self._skip.items():
            history = await self._ports.history(partition, offset)
            await self._slicer.drive(self._decide.recall(history, self._homes))

    async def _reset(self, base: str | None) -> None:
        self._tip = base
        self._tree = self.repo.tree(base)
        if base is not None:
            self.repo.set_branch(self.branch, base)
        root = self.repo.read_commit(base).tree if base is not None else None
        await self._slicer.drive(self._refresh_homes(root))

    def _refresh_homes(self, root: bytes | None) -> Steps[None]:
        """Bring the home indexes to the tree `root` (the files that changed since the last root)."""
        folders = [
            normalize_target_path(target.path)
            for name in sorted(self._decide.own_targets())
            if (target := self._decide.target(name)) is not None
        ]
        return self._homes.refresh(self.repo.objects, root, folders)

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
        # a late author makes no commit, so no trailer covers it; noting it again changes nothing.
        # A snapshot's records are collected again: its end says whether the branch carries it.
        redelivered = self._carried(item)
        if redelivered and not isinstance(item.body, LateAuthor | ResyncBegin | ResyncChunk | ResyncEnd):
            metrics.SKIPPED.labels(metrics.SkipReason.ALREADY_COMMITTED).inc()
            if isinstance(item.body, TargetDeleted):
                self._retiring.discard(item.stream.target)
                self._deleted.add(item.stream.target)
                self._skip_snapshot(self._decide.snapshots.drop_target(item.stream.target))
            if isinstance(item.body, CommitRequested) and self._remote_tip is not None:
                commits = flush.first_parents(self.repo.read_commit, self._remote_tip)
                await self._requests.redelivered(commits, item, item.body)
            self._emit(self._decide.redelivered(item))
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
            action = await self._requests.take(self._decide.window, item, body)
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
            self._skip_snapshot(self._decide.snapshots.begin(item, body, carried=redelivered))
        elif isinstance(body, ResyncChunk):
            self._skip_snapshot(self._decide.snapshots.chunk(item, body))
            await self._part(item)
        elif isinstance(body, LateAuthor):
            await self._late_author(item, body)
        else:
            await self._end(item, body)
        metrics.PENDING.labels(*self._labels).set(self.unsettled)

    def _carried(self, item: WorkItem) -> bool:
        """Whether the branch tip's `Reverser-Offset` claims `item` (at or below it, same partition)."""
        return item.offset <= self._skip.get(item.partition, -1)

    async def _gone(self, item: WorkItem) -> bool:
        """Whether `item` belongs to a target already deleted at its place in the log.

        A target the configuration lacks was deleted (or never configured). Its records before its
        `TargetDeleted` were routed while it existed and are written; those after it are late
        (a stream still stopping) and skipped. Which side a record is on is read from the log,
        not remembered: after a restart the `TargetDeleted` may be behind the committed offset,
        so the FIFO asks once per target whether one still follows this record on the partition.
        """
        if self._decide.target(item.stream.target) is not None:
            return False
        if item.stream.target in self._deleted:
            return True
        deletion_ahead = self._ports.deletion_ahead
        if deletion_ahead is None or item.stream.target in self._retiring:
            return False
        if await deletion_ahead(item):
            self._retiring.add(item.stream.target)
            return False
        logger.warning(
            "%s %s: target %s is not in the configuration and no TargetDeleted of it follows "
            "offset %d:%d on the log: its records are skipped",
            self.provider.name,
            self.branch,
            item.stream.target,
            item.partition,
            item.offset,
        )
        self._deleted.add(item.stream.target)
        return True

    # late authors (pipeline.commit.notes) ----------------------------------------------------
    async def _late_author(self, item: WorkItem, body: LateAuthor) -> None:
        """A late fact named an unresolved change's author: note it once its commit is pushed."""
        window = self._decide.window
        if window is not None and (body.work_partition, body.work_offset) in window.offsets:
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
                self._remote_tip, self._tree, self._decide.book, self._sealed, int(self._wall() * 1000)
            )
        except GitRemoteError as exc:
            await self._push_failed(exc)
            return
        self._emit(states)
        self._settle(done)

    def _sealed(self, item: WorkItem) -> bool:
        stream = item.stream
        sensitive = self._decide.sensitive(self._decide.target(stream.target))
        return is_sensitive(stream.group, stream.resource, sensitive)

    def update_targets(self, settings: Settings) -> None:
        """A changed configuration's targets apply from the next record on (a removed target's
        records before its `TargetDeleted` are then written with prune `Never`, those after it
        are skipped: see `_gone`)."""
        self._decide.update_targets(settings)
        if self.synced:
            # between two records, in one go: only a folder new to the configuration is read whole
            finish(self._refresh_homes(self._homes.root))
        # a target configured again is written again; if it goes, the log decides anew
        self._deleted -= self._decide.target_names
        self._retiring -= self._decide.target_names

    def _report_skip(self, skip: Skip) -> None:
        """Count a skipped record (or snapshot object) and log why, as the decider worded it."""
        if skip.detail:
            logger.log(logging.WARNING if skip.warn else logging.INFO, "%s", skip.detail)
        metrics.SKIPPED.labels(skip.reason).inc()

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

    async def _write(self, item: WorkItem, write: Write) -> None:
        here = (item.partition, item.offset)
        decided = self._decide.write(item, write, self._homes)
        if isinstance(decided, Reject):
            self._report_skip(Skip(metrics.SkipReason.BAD_RECORD, decided.detail, warn=True))
            if self._ports.reject is not None:
                await self._ports.reject(item, decided.error)
            self._settle([here])
            return
        if isinstance(decided, Skip):
            self._report_skip(decided)
            self._settle([here])
            return
        before = self._decide.closing(decided)
        if before is not None:
            await self._finalize(before)
        after = self._decide.stage(decided, self._clock())
        if after is not None:
            await self._finalize(after)

    async def _end(self, item: WorkItem, body: ResyncEnd) -> None:
        """Apply a complete snapshot; the index entries its commit adds are long-lived, like the
        ones a sync builds (`gcpolicy.long_lived`)."""
        with gcpolicy.long_lived():
            await self._apply_snapshot(item, body)

    async def _apply_snapshot(self, item: WorkItem, body: ResyncEnd) -> None:
        outcome = self._decide.snapshots.end(item, body, carried=self._carried(item))
        if isinstance(outcome, Skipped):
            self._skip_snapshot(outcome)
            return
        if isinstance(outcome, Carried):
            metrics.SKIPPED.labels(metrics.SkipReason.ALREADY_COMMITTED).inc(len(outcome.offsets))
            self._emit(self._decide.carried(outcome, item))
            self._settle(outcome.offsets)
            return
        await self._finalize(CloseReason.SNAPSHOT)
        plan, skips = await self._slicer.drive(
            self._decide.snapshot_steps(outcome, item, body, self._tree, self._homes)
        )
        for skip in skips:
            self._report_skip(skip)
        await self._delete_absent(plan, item, body)
        await self._commit(plan, outcome.offsets)
        if outcome.snapshot.parts and self._pending:
            # the last part of a snapshot committed in parts goes out at once like the others:
            # held for the cooldown it held its plan, and a first sync's end, for seconds
            await self.push(bulk=True)

    async def _part(self, item: WorkItem) -> None:
        """Commit and push a full part of the snapshot `item` belongs to, so its plan is released
        before the next part is planned (`providers[].snapshot_part_objects` bounds the memory).

        The part settles no offset and claims none: the snapshot's records settle with its last
        commit, and a restart before that reads them again from the begin, each part then writing
        what the tree has (no second commit). Pushed at once, past the cooldown: a part held for
        the cooldown would hold its plan too. The open window is committed first, as before a
        snapshot's end: an attributed write routed inside the snapshot goes under its author
        before the part that lists its object.
        """
        snapshot = self._decide.snapshots.part_due(item, self.provider.snapshot_part_objects)
        if snapshot is None:
            return
        # the index entries its commit adds are long-lived, as at a snapshot's end (`_end`): left
        # in the collector's walks, each full collection would walk every part before it
        with gcpolicy.long_lived():
            await self._commit_part(snapshot, item)

    async def _commit_part(self, snapshot: Collected, item: WorkItem) -> None:
        await self._finalize(CloseReason.SNAPSHOT)
        plan, skips = await self._slicer.drive(
            self._decide.part_steps(snapshot, item, self._tree, self._homes)
        )
        for skip in skips:
            self._report_skip(skip)
        await self._commit(plan, [])
        snapshot.parts += 1
        del plan  # the push below releases the part's plan: nothing here may keep it past that
        if self._pending:
            await self.push(bulk=True)

    async def _delete_absent(self, snapshot: Plan, end: WorkItem, body: ResyncEnd) -> None:
        """Under `OnEvent`, delete what this pipeline wrote and the snapshot no longer lists.

        Such an object was deleted between the stream's cursor and the snapshot, so no watch event
        carried its delete. The decider names the candidates and plans the deletions; which
        candidates this pipeline wrote may need the file's history. Files it did not write
        (foreign files) are kept, as the prune matrix says (docs/commit-worker.md). The deletions
        carry no offsets: the snapshot's commit settles the records.
        """
        candidates = self._decide.absent_candidates(snapshot, end, self._tree)
        written = [path for path in candidates if await self._written_here(path)]
        for plan in self._decide.absent_plans(snapshot, end, body, written):
            metrics.SNAPSHOT_DELETES.labels(end.stream.target, plan.byline.kind).inc(len(plan.writes))
            await self._commit(plan, [])

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
        return own and names_fifo(info.trailers(), self.provider.name, self.branch)

    async def _retire(self, item: WorkItem, body: TargetDeleted) -> None:
        """A deleted target: its unfinished snapshots end, and under `remove_files` its documents go.

        The removal is one commit by the committer that claims this record's offset (so a
        redelivery finds it done); the open window is committed first, because that trailer
        claims every earlier offset of the partition.
        """
        stream = item.stream
        self._retiring.discard(stream.target)
        self._deleted.add(stream.target)
        self._skip_snapshot(self._decide.snapshots.drop_target(stream.target))
        await self._finalize(CloseReason.TARGET_DELETED)
        plan = self._decide.retire(item, body, self._tree)
        folder = plan.retired.folder if plan.retired is not None else ""
        logger.info(
            "%s %s: target %s deleted (%s, prune %s): %s",
            self.provider.name,
            self.branch,
            stream.target,
            body.reason,
            body.prune,
            f"removing {len(plan.writes)} document(s) under {folder or '.'}/"
            if body.remove_files
            else "files kept",
        )
        await self._commit(plan, [(item.partition, item.offset)])

    async def remove_unlisted(self, target: TargetSettings) -> None:
        """Delete the documents under `target`'s folder that the state book does not hold.

        For a history replay into a branch that had content (`Decider.unlisted`).
        """
        plan = self._decide.unlisted(target, self._tree, self._homes)
        if plan is None:
            return
        await self._finalize(CloseReason.SHUTDOWN)
        await self._commit(plan, [])

    # windows and commits -------------------------------------------------------------------
    async def _finalize(self, reason: CloseReason) -> None:
        closed = self._decide.close()
        if closed is None:
            return
        metrics.WINDOW_CLOSES.labels(*self._labels, reason).inc()
        await self._commit(closed.plan, closed.offsets)

    def _add_sops_rules(self, plan: Plan, applied: Applied) -> None:
        """The target folder's `.sops.yaml` with its age recipients, in the commit that first
        writes an encrypted file there (`pipeline.sealing.sopsrules`); never over an existing one."""
        target = self._decide.target(plan.target)
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
        applied.changed_file("create", path, content)

    def _place(
        self,
        placement: Placement,
        render: RenderCheck,
        canonical: str,
        content: bytes | None,
        change: LiveChange,
    ) -> IntentPlan | None:
        """Where a change goes on the tree being committed (`inplace.place`, new objects where the
        target's `placement` says), checked with the real kustomize when the target renders
        (`RenderCheck`); the folder's index learns each file as it is planned, so the plan's next
        change sees it."""
        folder = self._homes.folder(change.folder)
        if folder is None:
            return None
        planned = place(folder, canonical, content, change, placement)
        if planned is not None:
            render.verify(folder, planned.writes, change)
        for write in planned.writes if planned is not None else ():
            folder.update(write.path, write.data)
        return planned

    async def _make_commit(self, plan: Plan) -> tuple[str | None, list[Refused]]:
        """The commit of `plan` on the local tip (None when it changes nothing), and the changes the
        in-place writer refused (`_refused` parks them).

        Applying the plan and indexing the written files run in slices: a snapshot's commit writes
        every object it lists. Nothing else touches the tree meanwhile (the FIFO's lock is held).
        When the target renders its edits with kustomize (a subprocess per render root), the whole
        apply runs on a thread instead, so the event loop is never stalled by a render.
        """
        target = self._decide.target(plan.target)
        placement = target.placement_policy if target is not None else NO_PLACEMENT
        render = RenderCheck(target.kustomize if target is not None else KustomizeSettings(), plan.target)
        placer = partial(self._place, placement, render) if plan.changes else None
        steps = apply_steps(self._tree, plan, self.repo.store_blob, self.repo.objects.read, placer)
        if placer is not None and render.enabled:
            applied = await asyncio.to_thread(finish, steps)
        else:
            applied = await self._slicer.drive(steps)
        self._add_sops_rules(plan, applied)
        for kind in applied.placed:
            metrics.IN_PLACE_WRITES.labels(plan.target, kind).inc()
        for path in applied.refused:
            logger.warning(
                "%s %s: cannot write %s over a folder; skipped", self.provider.name, self.branch, path
            )
            metrics.SKIPPED.labels(metrics.SkipReason.PATH_CONFLICT).inc()
            # `_place` told the index about the file; the tree kept what it had
            blob = self._tree.get(path)
            self._homes.update(path, None if blob is None else self.repo.objects.read(blob), blob)
        for path in applied.not_ours:
            logger.warning(
                "%s %s: kept %s: it is not the object document its path names (unparseable, several "
                "documents or another object), so no sweep deletes it",
                self.provider.name,
                self.branch,
                path,
            )
        if applied.not_ours:
            metrics.NOT_OURS_KEPT.labels(plan.target).inc(len(applied.not_ours))
        if plan.sweep is not None:
            if applied.retained:
                metrics.RETAINED.labels(
                    plan.target, Prune.ALWAYS if plan.sweep.prune else Prune.ON_EVENT
                ).inc(applied.retained)
            if applied.swept:
                metrics.SWEEP_DELETES.labels(plan.target, plan.sweep.group, plan.sweep.resource).inc(
                    applied.swept
                )
        if not applied.changed:
            return None, applied.refusals
        # a folder's tree object is sorted and serialised anew for every commit that changes it:
        # 35 CPU-ms for a folder of 50,000 files, so a first sync's last parts held the loop for
        # 50-110 ms (asyncio's debug mode, 100,000 objects in two folders): off the loop
        tree = await asyncio.to_thread(self._tree.write)
        await self._slicer.drive(self._homes.committed(tree, applied.files, applied.rendered, self._tree.get))
        author = Signature(plan.byline.identity, plan.byline.time_s)
        committer = Signature(self.committer, int(self._wall()))
        sha = self.repo.commit(tree, self._tip, author, committer, message_for(plan, applied))
        self._tip = sha
        return sha, applied.refusals

    async def _refused(self, plan: Plan, refusals: list[Refused]) -> None:
        """Changes the in-place writer refused wrote nothing. Each is logged naming the file and the
        reason, counted, dropped from the plan (a replay onto a moved tip does not try it again),
        and its records are parked on the dead-letter topic like any record the branch cannot
        apply; they settle with the plan's other records. The target's result reports the newest
        (`refusals.py`), so the GitTarget is `Stalled` naming the file."""
        for refused in refusals:
            plan.writes.pop(refused.path, None)
            plan.changes.pop(refused.path, None)
            self._drop_states(plan, refused.change)
            key, error = refused.change.key, refused.refusal
            metrics.IN_PLACE_REFUSALS.labels(plan.target, error.reason).inc()
            logger.warning(
                "%s %s: %s %s/%s of target %s not written, nothing of it committed: %s",
                self.provider.name,
                self.branch,
                key.kind,
                key.namespace,
                key.name,
                plan.target,
                error,
            )
            if self._ports.reject is not None:
                for item in refused.change.items:
                    await self._ports.reject(item, error)
        if refusals and self._ports.on_result is not None:
            folder = self._homes.folder(refusals[-1].change.folder)
            refusal = refusal_of(refusals[-1], folder, int(self._wall() * 1000))
            await self._tell(self._refusals.refused(plan.target, self.provider.name, self.branch, refusal))

    def _drop_states(self, plan: Plan, change: LiveChange) -> None:
        """Object state records what Git holds: a refused change's record is not written."""
        placed = change.placed
        key = StateKey(plan.target, placed.group, placed.resource, placed.namespace, placed.name).encode()
        dropped = [r for r in plan.states if r.key == key]
        plan.states = [r for r in plan.states if r.key != key]
        self._finalized_states = [r for r in self._finalized_states if all(r is not d for d in dropped)]

    async def _caught_up(self) -> bool:
        """Whether the remote branch moved since the worker last saw it; if so the local branch is
        reset to it. A refused change is tried once more on the remote's tree: the user fixes a
        refused folder by pushing, and nothing else makes the worker look before its next push
        (which a refused change, writing nothing, never makes). Only without unpushed commits,
        which the push replays onto the remote anyway; a fetch that fails keeps the refusal."""
        if self._pending:
            return False
        try:
            await self.repo.fetch()
        except GitRemoteError as exc:
            logger.warning("%s %s: fetch after a refusal failed: %s", self.provider.name, self.branch, exc)
            return False
        remote = self.repo.remote_ref(self.branch)
        if remote is None or remote == self._remote_tip:
            return False
        self.repo.objects.discard()
        self._remote_tip = remote
        await self._reset(remote)
        return True

    async def _commit(self, plan: Plan, offsets: list[Offset]) -> None:
        sha, refusals = await self._make_commit(plan)
        if sha is None and refusals and await self._caught_up():
            sha, refusals = await self._make_commit(plan)
        if sha is not None:
            self._refusals.committed(plan.target)
        await self._refused(plan, refusals)
        self._finalized.extend(offsets)
        self._finalized_states.extend(plan.states)
        if sha is None:
            await self._requests.unchanged(plan.target, plan.requests)
            if not self._pending:
                self._settle_finalized()
            return
        self._pending.append(_Pending(plan, sha))
        metrics.COMMITS.labels(*self._labels, plan.byline.kind).inc()
        if self._ports.hook is not None:
            await self._ports.hook("committed")
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
        window = self._decide.window
        if idle and window is not None and now >= window.deadline:
            await self._finalize(window.clock_close_reason(now))
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

    async def push(self, *, bulk: bool = False) -> bool:
        """Push unpushed commits with a lease on the remote tip, replaying them after a conflict;
        `bulk` for a snapshot part's thousands of new files (`LocalRepo.push`)."""
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
                await self.repo.push(self.branch, self._tip, self._remote_tip, bulk=bulk)
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
            await self._report(PushOutcome.SUCCEEDED, "")
            await self._pushed()
            return True
        await self._push_failed(GitRemoteError(f"push still rejected after {PUSH_ATTEMPTS} attempts"))
        return False

    async def _report(self, outcome: PushOutcome, message: str) -> None:
        """Each target's newest unpushed commit and what the push did with it (best effort)."""
        if self._ports.on_result is None:
            return
        newest = {pending.plan.target: pending.sha for pending in self._pending}
        for target, sha in newest.items():
            result = TargetResult(
                target, self.provider.name, self.branch, sha, outcome, int(self._wall() * 1000), message
            )
            await self._tell(self._refusals.reported(result))
        carried = [(p.plan.target, p.sha, p.plan.requests) for p in self._pending if p.plan.requests]
        await self._requests.pushed(carried, outcome is PushOutcome.SUCCEEDED, message)

    async def _tell(self, result: TargetResult | RequestResult) -> None:
        """Report one result on the log (best effort: a lost report leaves only a status behind)."""
        on_result = self._ports.on_result
        if on_result is None:
            return
        try:
            await on_result(result)
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
        if self._ports.hook is not None:
            await self._ports.hook("pushed")
        self._settle_finalized()
        if self._late.waiting:
            await self._flush_late()

    def _remote_backoff(self) -> Backoff:
        """Pacing of retries against the Git remote: 1 s, doubling to `push_max_backoff_s`."""
        max_s = self.provider.push_max_backoff_s
        return Backoff(min(REMOTE_RETRY_INITIAL_S, max_s), max_s)

    async def _push_failed(self, exc: GitRemoteError) -> None:
        await self._report(PushOutcome.FAILED, str(exc))
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
        await self._reset(base)
        for plan in plans:
            sha, refusals = await self._make_commit(plan)
            if sha is not None:
                self._refusals.committed(plan.target)
            await self._refused(plan, refusals)
            if sha is not None:
                self._pending.append(_Pending(plan, sha))

    async def stop(self, reason: CloseReason = CloseReason.SHUTDOWN) -> bool:
        """Close the open window and push now, ignoring the cooldown; unfinished snapshots are dropped.

        Returns whether everything applied is on the remote. Offsets of dropped snapshots stay
        unsettled, so the next owner reads them again.
        """
        if not self.synced:
            return False
        await self._finalize(reason)
        self._decide.snapshots.clear()
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
