"""`reverser replay branch`: rebuild one Git branch from `<prefix>.object-state` or `<prefix>.branch-work`.

`--from object-state` (the default) writes the current objects of every target on the branch as
one reconciling commit per target: it needs no history, so it works however short the history
retention is, and starts a target on an empty branch as well as repairing a drifted one.
`--from history` replays every branch-work record still on the log: every work record stores its
resolved author, so replaying into an empty remote reproduces the same trees and authors (commit
SHAs differ only by the committer date), windows closing on the records' own observation times.
Into a remote that already has the branch, both reconcile (add, update, remove) instead of
refusing; the history replay removes objects only when no history aged out (docs/commit-worker.md).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from pipeline.codec import DecodeError
from pipeline.codec.branch_work import decode_work
from pipeline.codec.object_state import ObjectState, decode_state, target_prefix
from pipeline.commandline import add_config_argument, settings_from_args
from pipeline.commit.branch import BranchWorker
from pipeline.commit.consumer import remote_auth
from pipeline.commit.decide import rebuild_plan
from pipeline.commit.git.access import provider_access
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.repo import GitRemoteError, LocalRepo, Signature
from pipeline.commit.homes import BranchHomes
from pipeline.commit.identity import committer_identity
from pipeline.commit.inplace import LiveChange, indexed, place
from pipeline.commit.layout import normalize_target_path
from pipeline.commit.plan import apply_steps, message_for
from pipeline.commit.ports import BranchPorts
from pipeline.commit.position import LogPosition, Offset
from pipeline.commit.rebuild import Desired, desired_files, reconcile_plan
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.exitcodes import CommandError, ExitCode
from pipeline.gitcredentials import ObjectReader
from pipeline.gitnames import (
    GitNameError,
    check_branch_name,
    check_remote_url,
    check_url_without_password,
    origin_of,
)
from pipeline.intent.homes import FolderIndex
from pipeline.intent.plan import IntentPlan
from pipeline.log import Log, open_log
from pipeline.log.api import PendingRecord, TopicPartition
from pipeline.log.scan import extent_of, read_to_end
from pipeline.log.table import TableReader
from pipeline.log.topics import TopicNames
from pipeline.models import branch_key
from pipeline.placement import Placement
from pipeline.progress import ProgressReport
from pipeline.redaction import redact_url
from pipeline.slices import finish

__all__ = ["ReplayError", "ReplayRequest", "Source", "add_replay_branch_parser", "replay_branch"]

PUSH_EVERY_RECORDS = 2000


class Source(StrEnum):
    """Where a branch is rebuilt from."""

    OBJECT_STATE = "object-state"
    HISTORY = "history"


@dataclass(frozen=True, slots=True)
class _Job:
    """One rebuild: where from (settings, log), where to (repo, provider, branch), what, how to report."""

    settings: Settings
    log: Log
    repo: LocalRepo
    provider: ProviderSettings
    branch: str
    targets: list[TargetSettings]
    note: Callable[[str], object]
    tty: bool | None


class ReplayError(CommandError):
    """The replay cannot start or finish; the message says why."""


class ClusterReader(Protocol):
    """`get` of Secrets and ConfigMaps on the cluster (the service's `ClusterObjects`)."""

    async def read(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes]: ...

    async def close(self) -> None: ...


def add_replay_branch_parser(
    kinds: Any, cluster_reader: Callable[[Settings], ClusterReader] | None = None
) -> None:
    """Registered under `reverser replay` (see `pipeline.replay`), which gives the reader of a
    provider's credentials Secret (this stage has no Kubernetes client of its own)."""
    branch = kinds.add_parser(
        "branch", help="rebuild a Git branch from object-state (one commit per target) or from history"
    )
    add_config_argument(branch, reads_existing_log=True)
    branch.add_argument("--provider", required=True, help="provider name from the configuration")
    branch.add_argument("--branch", required=True, help="branch to rebuild")
    branch.add_argument(
        "--from",
        dest="source",
        choices=[s.value for s in Source],
        default=Source.OBJECT_STATE.value,
        help="object-state: the current objects, one reconciling commit per target (default); "
        "history: every branch-work record still on the log, one commit per original window",
    )
    branch.add_argument(
        "--target",
        action="append",
        dest="targets",
        help="only this target of the branch (repeatable; default: every target on the branch)",
    )
    branch.add_argument(
        "--into",
        help="remote to write to: a URL, or a directory (a bare repository is created there); "
        "default: the provider's own URL. A remote that has the branch is reconciled",
    )
    branch.set_defaults(func=_run, cluster_reader=cluster_reader)


def _target_url(into: str | None, provider: ProviderSettings) -> str:
    if into is None:
        return provider.url
    try:
        check_url_without_password(check_remote_url(into))
    except GitNameError as exc:
        raise ReplayError(f"--into: {exc}", ExitCode.USAGE) from None
    if "://" in into or into.startswith("git@"):
        return into
    path = Path(into)
    if not (path / "HEAD").exists():
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", "--end-of-options", str(path)], check=True)
    return str(path.resolve())


def _branch_targets(
    settings: Settings, provider: ProviderSettings, branch: str, names: list[str] | None
) -> list[TargetSettings]:
    """The configured targets writing to (provider, branch), narrowed to `names` (each must be one)."""
    mine = [
        t
        for t in settings.targets
        if t.provider == provider.name and (t.branch or provider.default_branch) == branch
    ]
    if names is None:
        return mine
    by_name = {t.name: t for t in mine}
    for name in names:
        if name not in by_name:
            raise ReplayError(
                f"--target: {name!r} is not a target of {provider.name} {branch}", ExitCode.USAGE
            )
    return [by_name[n] for n in names]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRequest:
    """Which branch to rebuild, from what, and into which remote (None: the provider's own).

    `targets` limits the rebuild to those targets of the branch (None: all of them); `tty` forces
    the progress bar on or off (None: when stderr is a terminal).
    """

    provider: str
    branch: str
    into: str | None = None
    source: Source = Source.HISTORY
    targets: list[str] | None = None
    tty: bool | None = None


async def replay_branch(
    settings: Settings,
    request: ReplayRequest,
    note: Callable[[str], object] = print,
    reader: ObjectReader | None = None,
) -> int:
    """Rebuild the branch into `request.into` (default: the provider's remote); returns the commits made.

    `reader` reads a provider's credentials Secret (`credentials_secret`), as the commit worker does.

    `note` receives the summary and warnings; the progress bar (or lines) goes to stderr.
    """
    provider_name, branch, into = request.provider, request.branch, request.into
    source, targets, tty = request.source, request.targets, request.tty
    try:
        provider = settings.provider(provider_name)
    except KeyError:
        raise ReplayError(f"unknown provider {provider_name!r}", ExitCode.USAGE) from None
    try:
        check_branch_name(branch)
    except GitNameError as exc:
        raise ReplayError(f"--branch: {exc}", ExitCode.USAGE) from None
    chosen = _branch_targets(settings, provider, branch, targets)
    url = _target_url(into, provider)
    target_provider = provider.model_copy(update={"url": url})
    own_origin = into is None or _same_origin(url, provider.url)
    auth = remote_auth(provider) if own_origin else None
    async with open_log(settings) as log:
        with tempfile.TemporaryDirectory(prefix="reverser-replay-") as clones:
            keys = Path(clones) / "keys"
            remote = None
            if own_origin and provider.reads_cluster and reader is not None:
                remote = SecretAccess(target_provider, keys, reader, env_auth=auth)
            access = provider_access(target_provider, auth, keys, remote)
            repo = access.clone(Path(clones), provider_name, branch, url)
            try:
                job = _Job(settings, log, repo, target_provider, branch, chosen, note, tty)
                rebuild = _from_object_state if source == Source.OBJECT_STATE else _from_history
                commits = await rebuild(job)
            finally:
                repo.close()
            return commits


# object-state -------------------------------------------------------------------------------------


async def _read_states(
    log: Log, topic: str, targets: list[TargetSettings], tty: bool | None, note: Callable[[str], object]
) -> dict[str, list[ObjectState]]:
    """The first read of object-state for `targets`, decoded, with a progress bar over the topic."""
    prefixes = tuple(target_prefix(t.name) for t in targets)
    reports: list[ProgressReport] = []

    def advance(done: int, _total: int) -> None:
        reports[0].advance(done - reports[0].done)

    table = TableReader(log, topic, keys=lambda key: key.startswith(prefixes), progress=advance)
    await table.open()
    try:
        with ProgressReport(f"reading {topic}", table.total, tty=tty) as report:
            reports.append(report)
            snapshot = await table.first_read()
    finally:
        await table.close()
    found: dict[str, list[ObjectState]] = {t.name: [] for t in targets}
    for record in snapshot.records.values():
        try:
            state = decode_state(record)
        except DecodeError as exc:
            note(f"warning: {topic}@{record.partition}:{record.offset} undecodable, skipped: {exc}")
            continue
        found.setdefault(state.target, []).append(state)
    return found


async def _from_object_state(job: _Job) -> int:
    settings, log, repo, provider, branch = job.settings, job.log, job.repo, job.provider, job.branch
    targets, note, tty = job.targets, job.note, job.tty
    topic = TopicNames.for_prefix(settings.log.topic_prefix).object_state
    states = await _read_states(log, topic, targets, tty, note)
    await repo.fetch()
    remote = repo.remote_ref(branch)
    base = remote
    if base is None and branch != provider.default_branch:
        base = repo.remote_ref(provider.default_branch)
    tree = repo.tree(base)
    tip = base
    committer = committer_identity(provider.committer.name, provider.committer.email)
    homes = BranchHomes()
    finish(
        homes.refresh(
            repo.objects,
            repo.read_commit(base).tree if base is not None else None,
            [normalize_target_path(t.path) for t in targets],
        )
    )
    commits = 0
    for target in targets:
        folder = homes.folder(normalize_target_path(target.path))
        placeable = _placeable(folder, target.placement_policy)
        desired: Desired = desired_files(target, states.get(target.name, []), placeable)
        for refused in desired.refused:
            note(f"warning: {refused}; not written")
        plan = reconcile_plan(
            tree,
            target,
            desired,
            rebuild_plan(
                LogPosition(provider.name, branch, 0, 0), target.name, committer, topic, int(time.time())
            ),
            _homes_of(folder, desired),
        )
        placer = partial(_place, folder, target.placement_policy)
        applied = finish(apply_steps(tree, plan, repo.store_blob, repo.objects.read, placer))
        for path in applied.refused:
            note(f"warning: cannot write {path} over a folder; skipped")
        for refusal in applied.refusals:
            note(f"warning: {refusal.path}: {refusal.refusal}; not written")
        if not applied.changed:
            note(f"{target.name}: {len(desired.files)} object(s), already up to date")
            continue
        stamp = Signature(committer, int(time.time()))
        tip = repo.commit(tree.write(), tip, stamp, stamp, message_for(plan, applied))
        commits += 1
        note(f"{target.name}: {len(desired.files)} object(s), {len(applied.paths)} change(s)")
    if commits and tip is not None:
        repo.set_branch(branch, tip)
        await repo.push(branch, tip, remote)
    note(f"rebuilt {branch} from {topic}: {commits} commit(s) on {branch}")
    return commits


def _placeable(folder: FolderIndex | None, placement: Placement) -> Callable[[ObjectState], bool] | None:
    """Which stored objects the rebuild places (`inplace.indexed`, or any when a placement template
    may apply): the others are written at their canonical path without reading their JSON."""
    if folder is None:
        return None
    if placement.by_type or placement.default is not None:
        return lambda _state: True
    return lambda state: indexed(folder, state.group, state.namespace, state.name)


def _homes_of(folder: FolderIndex | None, desired: Desired) -> frozenset[str]:
    """The files on the branch where a desired object lives: never deleted by the rebuild."""
    if folder is None:
        return frozenset()
    return frozenset(h.path for c in desired.changes.values() for h in folder.index.candidates(c.key))


def _place(
    folder: FolderIndex | None,
    placement: Placement,
    canonical: str,
    content: bytes | None,
    change: LiveChange,
) -> IntentPlan | None:
    """Where a rebuilt object goes on the branch's tree (as the commit worker places a change,
    without its kustomize render check): into its home document, else where the placement says,
    else the canonical path (None). The index learns each file as it is planned."""
    if folder is None:
        return None
    planned = place(folder, canonical, content, change, placement)
    for write in planned.writes if planned is not None else ():
        folder.update(write.path, write.data)
    return planned


# history ------------------------------------------------------------------------------------------


async def _from_history(job: _Job) -> int:
    settings, log, repo, provider, branch = job.settings, job.log, job.repo, job.provider, job.branch
    targets, note, tty = job.targets, job.note, job.tty
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    key = branch_key(provider.name, branch)
    chosen = {t.name for t in targets}
    extent = await extent_of(log, topic)
    total = extent.total
    aged_out = sum(extent.starts.values())
    settled: list[Offset] = []
    states: list[PendingRecord] = []

    async def nothing_yet(_targets: frozenset[str]) -> list[ObjectState]:
        return []

    # The state book of this replay (fresh, fed only by the replayed work) says which objects the
    # history leaves on the branch: the reconcile step removes the rest.
    ports = BranchPorts(load_state=nothing_yet, on_state=states.extend)
    worker = BranchWorker(settings, provider, branch, repo, settled.extend, ports)
    await worker.sync()
    existing = worker.remote_tip
    used = 0
    with ProgressReport(f"replaying {topic}", total, tty=tty) as report:
        async for chunk in read_to_end(log, extent):
            for gap in chunk.gaps:
                aged_out += gap.lost
                report.note(
                    f"warning: {gap.lost} record(s) of {gap.topic}[{gap.partition}] "
                    "were deleted by retention before the replay"
                )
            for record in chunk.records:
                tp = TopicPartition(record.topic, record.partition)
                report.advance()
                if record.key != key:
                    continue
                try:
                    item = decode_work(record)
                except DecodeError as exc:
                    report.note(f"warning: {tp}@{record.offset} undecodable, skipped: {exc}")
                    continue
                if item.stream.target not in chosen:
                    continue
                await worker.handle(item)
                used += 1
                if used % PUSH_EVERY_RECORDS == 0:
                    await worker.push()
    await worker.stop()
    if existing is not None:
        await _remove_unreplayed(worker, targets, aged_out, note)
    pushed = await worker.stop()
    commits = _count_commits(repo, worker.tip, stop_at=existing)
    if not pushed:
        raise ReplayError(f"the final push to {redact_url(provider.url)} failed; see the log above")
    note(f"replayed {report.done}/{total} records ({used} for {branch}): {commits} commit(s) on {branch}")
    return commits


async def _remove_unreplayed(
    worker: BranchWorker, targets: list[TargetSettings], aged_out: int, note: Callable[[str], object]
) -> None:
    """Into a branch that had content: remove the documents the replayed history does not leave.

    Only when the whole history was replayed; with records aged out, a missing document may be an
    object whose creation aged out, so it is kept (rebuild from object-state instead).
    """
    if aged_out:
        note(
            f"warning: {aged_out} branch-work record(s) aged out; documents the retained history "
            "does not mention are kept (use --from object-state for an exact rebuild)"
        )
        return
    for target in targets:
        await worker.remove_unlisted(target)


def _same_origin(url: str, provider_url: str) -> bool:
    """Whether the provider's credentials may go to `url`: same scheme, host and port only."""
    origin = origin_of(url)
    return origin is not None and origin == origin_of(provider_url)


def _count_commits(repo: LocalRepo, tip: str | None, stop_at: str | None = None) -> int:
    count = 0
    sha = tip
    while sha and sha != stop_at:
        count += 1
        parents = repo.read_commit(sha).parents
        sha = parents[0] if parents else None
    return count


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)

    async def replay() -> None:
        objects = args.cluster_reader(settings) if args.cluster_reader is not None else None
        try:
            request = ReplayRequest(
                provider=args.provider,
                branch=args.branch,
                into=args.into,
                source=Source(args.source),
                targets=args.targets,
            )
            await replay_branch(settings, request, reader=objects.read if objects is not None else None)
        finally:
            if objects is not None:
                await objects.close()

    try:
        asyncio.run(replay())
    except GitRemoteError as exc:
        raise ReplayError(str(exc)) from exc
    return ExitCode.OK
