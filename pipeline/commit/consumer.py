"""The commit worker as a consumer-group member: one FIFO task per branch, offsets committed after push.

Branch work is keyed by (provider, branch), so one partition owner sees every record of a branch.
Records are handed to that branch's worker in log order; a partition's offset is committed only
up to its oldest record not yet settled, so a crash or a rebalance redelivers exactly the work
that might not be on the remote, and the branch tip's trailer filters what already is.

A provider whose access cannot be built is parked, never a reason to stop: its branches wait on
the log (`pipeline/commit/parking.py`), the `reverser_commit_provider_parked` gauge and, with
custom resources, the GitProvider's `Ready` condition say why, and every other provider goes on.
A configuration that fixes or removes it lets its work go on (or be dead-lettered) live.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from pipeline import gcpolicy
from pipeline.backoff import log_retry
from pipeline.codec import DecodeError
from pipeline.codec.branch_work import TargetDeleted, WorkItem, decode_work
from pipeline.codec.commit_request_result import RequestResult, encode_request_result
from pipeline.codec.credentials_report import CredentialsReport, encode_credentials
from pipeline.codec.dead_letter import letter_record
from pipeline.codec.object_state import ObjectState, decode_state, target_prefix
from pipeline.codec.target_result import TargetResult, encode_result
from pipeline.commit import metrics
from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.access import AccessError, ProviderAccess, provider_access
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.keyfiles import KeyFile, kinds_in_use, remove_files, remove_unconfigured
from pipeline.commit.git.repo import RemoteAuth
from pipeline.commit.offsets import OffsetBook
from pipeline.commit.parking import ParkedWork
from pipeline.commit.ports import BranchPorts, Hook
from pipeline.commit.position import Offset
from pipeline.commit.window import CloseReason
from pipeline.commit.workqueue import WorkQueue
from pipeline.config import ProviderSettings, Settings
from pipeline.gitcredentials import CredentialsError, CredentialsReason, ObjectReader
from pipeline.log.api import (
    GroupConsumer,
    Log,
    LogError,
    LogUnavailableError,
    PendingRecord,
    RebalanceListener,
    Record,
    TopicPartition,
)
from pipeline.log.retrying import until_done
from pipeline.log.scan import read_until
from pipeline.log.table import TableReader
from pipeline.log.topics import TopicNames
from pipeline.slices import Slicer
from pipeline.tasks import cancel_all, logged_failure, task_failure

__all__ = ["CommitWorker", "UnknownProviderError", "group_id_for", "remote_auth"]

logger = logging.getLogger(__name__)

# How far before a branch tip's offset a new owner reads to learn which versions are written.
VERSION_LOOKBACK_RECORDS = 10_000
# Empty fetches (of 500 ms each) after which that read gives up.
HISTORY_IDLE_ROUNDS = 20
# Empty fetches (of 500 ms each) after which re-reading one record for its dead letter tries anew.
RAW_READ_IDLE_ROUNDS = 10
# How often offsets are committed with nothing newly settled (the markers after the last record).
MARKER_COMMIT_INTERVAL_S = 2.0
# Object-state records per append: a snapshot's thousands are written (and encoded) in chunks,
# with the event loop given back between two.
STATE_APPEND_RECORDS = 500


class UnknownProviderError(LookupError):
    """A work record names a provider the configuration does not have (replay it after adding it)."""


def group_id_for(settings: Settings) -> str:
    """The consumer group of the commit worker for this topic prefix."""
    return f"{settings.log.topic_prefix}.commit-worker"


def remote_auth(provider: ProviderSettings) -> RemoteAuth | None:
    """HTTP basic credentials from the provider's environment variables.

    A configured but unset variable is logged and treated as "no credentials": the remote then
    refuses, nothing is settled, and the work waits on the log until the variable is provided.
    """
    if provider.password_env is None:
        return None
    password = os.environ.get(provider.password_env)
    if password is None:
        logger.error(
            "provider %s: environment variable %s is not set; pushing without credentials",
            provider.name,
            provider.password_env,
        )
        return None
    username = os.environ.get(provider.username_env, "") if provider.username_env else ""
    return RemoteAuth(username, password)


@dataclass(slots=True)
class _Branch:
    worker: BranchWorker
    queue: asyncio.Queue[WorkItem]
    task: asyncio.Task[None]
    partition: TopicPartition
    lock: asyncio.Lock


class CommitWorker(RebalanceListener):
    """Consumes `<prefix>.branch-work` and runs one `BranchWorker` per (provider, branch)."""

    name = "commit-worker"

    def __init__(self, settings: Settings, log_: Log, *, hook: Hook | None = None) -> None:
        self.settings = settings
        self.log = log_
        names = TopicNames.for_prefix(settings.log.topic_prefix)
        self.topic = names.branch_work
        self.state_topic = names.object_state
        # object-state records of settled work, appended before the offsets that produced them commit
        self._state_out: list[PendingRecord] = []
        self._config_topic = names.config
        self._dead_letter_topic = names.dead_letter
        self.group_id = group_id_for(settings)
        self._hook = hook
        self._book = OffsetBook()
        self._branches: dict[tuple[str, str], _Branch] = {}
        # The partitions whose records this member hands to FIFOs: emptied of revoked partitions
        # the moment a revocation starts, before its listener awaits anything, so records fetched
        # earlier (or while the revoked FIFOs flush) start no FIFO on a partition about to move.
        self._owned: set[TopicPartition] = set()
        self._consumer: GroupConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._settled = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._failed: str | None = None
        self._started = False
        self.clones = settings.workdir / "git"
        keys = settings.workdir / "keys"
        self._keys = keys
        # credentials from the cluster, one per provider that named a Secret or known-hosts object;
        # kept across configuration versions (and removals) so running branches see the change
        self._secrets: dict[str, SecretAccess] = {}
        self._reader: ObjectReader | None = None
        # key files left by an earlier configuration that no longer has their provider
        remove_unconfigured(keys, settings.providers)
        self._access: dict[str, ProviderAccess] = {}
        # providers whose access failed, and why: their branches wait in `_parking`
        self._parked: dict[str, AccessError] = {}
        self._parking = ParkedWork()
        # access reports still to publish (custom-resource status), newest per provider
        self._access_reports: dict[str, CredentialsReport] = {}
        for provider in settings.providers:
            self._take_access(provider, starting=True)
        #: Catches this process up with the newest published configuration (custom-resource
        #: mode) before work naming an unknown provider is skipped.
        self.refresh_config: Callable[[], Awaitable[None]] | None = None
        metrics.register_owner(self)

    def use_config_refresh(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self.refresh_config = refresh

    def use_object_reader(self, reader: ObjectReader) -> None:
        """How Secrets and ConfigMaps are read from the cluster (`reverser run` gives a Kubernetes
        client's `get`); without one, providers that name a Secret get no credentials."""
        self._reader = reader

    async def _read_object(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes]:
        if self._reader is None:
            raise CredentialsError(
                CredentialsReason.UNREACHABLE,
                f"{kind} {namespace}/{name}: this process has no cluster to read it from",
            )
        return await self._reader(kind, namespace, name)

    def _provider_access(self, provider: ProviderSettings) -> ProviderAccess:
        """The provider's access; credentials from the cluster through its (kept) SecretAccess."""
        auth = remote_auth(provider)
        remove_files(self._keys, provider.name, set(KeyFile) - kinds_in_use(provider))
        remote = self._secrets.get(provider.name)
        if not provider.reads_cluster:
            if remote is not None:  # a running branch still holding it now reads what the file says
                remote.configure(provider, auth)
            return provider_access(provider, auth, self._keys)
        if remote is None:
            remote = self._secrets[provider.name] = SecretAccess(
                provider,
                self._keys,
                self._read_object,
                env_auth=auth,
                report=self._report_credentials if self.settings.custom_resources.enabled else None,
            )
        else:
            remote.configure(provider, auth)
        from_secret = provider.signing_secret is not None
        access = provider_access(provider, auth, self._keys, remote)
        # every clone signs through the SecretAccess's signer, so a provider that starts, stops or
        # moves its signing applies it in running branches too
        remote.signer.delegate = None if from_secret else access.signer
        return dataclasses.replace(access, signer=remote.signer)

    def _take_access(self, provider: ProviderSettings, *, starting: bool = False) -> None:
        """Build the provider's access, parking the provider when that fails and letting its
        waiting work go on when it works again."""
        name = provider.name
        try:
            access = self._provider_access(provider)
        except AccessError as exc:
            self._access.pop(name, None)
            self._park_provider(name, exc)
            return
        self._access[name] = access
        if name in self._parked:
            self._unpark_provider(name, removed=False)
        elif starting and not provider.reads_cluster:
            # this process knows its access works: a report an earlier process left is replaced
            self._report_access(name, None)

    def _park_provider(self, name: str, error: AccessError) -> None:
        previous = self._parked.get(name)
        self._parked[name] = error
        if previous is not None and (str(previous), previous.reason) == (str(error), error.reason):
            return
        logger.error("provider %s is parked, its branches wait until it is fixed or removed: %s", name, error)
        self._report_access(name, error)

    def _unpark_provider(self, name: str, *, removed: bool) -> None:
        del self._parked[name]
        waiting = self._parking.waiting(name)
        self._parking.release(name)
        what = "was removed" if removed else "works again"
        logger.info("provider %s %s: the work of %d waiting branch(es) goes on", name, what, waiting)
        if not removed:
            self._report_access(name, None)
            remote = self._secrets.get(name)
            if remote is not None:  # its own state replaces this report at its next use
                remote.report_again()

    def _report_access(self, name: str, error: AccessError | None) -> None:
        """Custom-resource mode: the GitProvider's status says whether its access works (sent by
        `_send_access_reports`; about no Secret, so the report names none)."""
        if not self.settings.custom_resources.enabled:
            return
        now_ms = int(time.time() * 1000)
        if error is None:
            self._access_reports[name] = CredentialsReport(name, True, "", "", now_ms)
            return
        message = f"the commit worker parked this provider, its branches wait: {error}"
        self._access_reports[name] = CredentialsReport(name, False, error.reason, "", now_ms, message)

    async def _send_access_reports(self) -> None:
        while self._access_reports:
            name, report = next(iter(self._access_reports.items()))
            try:
                await self._report_credentials(report)
            except LogError as exc:  # sent with the next configuration (or start)
                logger.warning("reporting the access of provider %s failed: %s", name, exc)
                return
            if self._access_reports.get(name) is report:
                del self._access_reports[name]

    async def apply(self, settings: Settings) -> None:
        """Take a changed configuration: new providers, changed targets (prune, encryption, window).

        A branch FIFO that is running keeps its clone and its open window; its targets' settings
        apply from the next record on. A provider whose access settings changed is used by the
        next FIFO of its branches; one whose access fails is parked, one fixed goes on, and one
        removed has its waiting work dead-lettered. A removed provider's key files are removed at
        once.
        """
        self.settings = settings
        for provider in settings.providers:
            self._take_access(provider)
        for name in (set(self._access) | set(self._parked)) - {p.name for p in settings.providers}:
            self._access.pop(name, None)
            if name in self._parked:
                self._unpark_provider(name, removed=True)
            if name in self._secrets:  # kept: the provider may come back to a running branch
                self._secrets[name].retire()
            remove_files(self._keys, name)
        for key, branch in list(self._branches.items()):
            # under the FIFO's lock: a snapshot applied in slices gives the loop back mid-way, and
            # must see one configuration and one home index from its first object to its last
            async with branch.lock:
                if self._branches.get(key) is branch:
                    branch.worker.update_targets(settings)
        await self._send_access_reports()

    # component -----------------------------------------------------------------------------
    async def start(self) -> None:
        await self._send_access_reports()
        self._consumer = self.log.group_consumer(self.group_id, [self.topic], listener=self)
        await self._consumer.start()
        self._tasks = [
            asyncio.create_task(self._fetch_loop(), name="commit-fetch"),
            asyncio.create_task(self._commit_loop(), name="commit-offsets"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)
        self._started = True

    def ready(self) -> bool:
        return self._started and self._failed is None

    def failure(self) -> str | None:
        """The task that died and why: its branch holds its work until a new process takes over."""
        return self._failed

    async def stop(self) -> None:
        """Stop fetching, close every window and push it, commit what was pushed, leave the group."""
        await cancel_all(self._tasks)
        self._tasks = []
        self._owned = set()
        for key in list(self._branches):
            await self._stop_branch(key, CloseReason.SHUTDOWN)
        await self._commit_due()
        if self._consumer is not None:
            await self._consumer.close()
            self._consumer = None
        self._started = False

    def owned_partitions(self) -> Iterable[tuple[str, int]]:
        """The branch-work partitions the group gave this member (the ownership gauges)."""
        if self._consumer is None:
            return []
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def owned_branches(self) -> Iterable[tuple[str, str]]:
        return list(self._branches)

    def parked_providers(self) -> Iterable[tuple[str, str]]:
        """`reverser_commit_provider_parked`: read at scrape time, so it never outlives the worker."""
        if not self._started:
            return []
        return [(name, error.reason) for name, error in self._parked.items()]

    def _task_done(self, task: asyncio.Task[None]) -> None:
        failure = logged_failure(task, logger, "commit worker")
        if failure is not None:
            self._failed = failure

    # rebalance -----------------------------------------------------------------------------
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Flush and push the branches on revoked partitions, then commit what they settled.

        The group generation stays valid until this returns, so the flush may still commit the
        revoked partitions; nothing may start new work on them meanwhile (see `_owned`).
        """
        self._owned -= revoked
        stopping = [key for key, branch in self._branches.items() if branch.partition in revoked]
        for key in stopping:
            await self._stop_branch(key, CloseReason.REVOKED)
        if stopping:
            # the stopped workers' indexes were frozen out of the collector's walks (gcpolicy);
            # one turn of the loop first runs their cancelled tasks' callbacks, which hold them
            await asyncio.sleep(0)
            gcpolicy.reclaim()
        await self._commit_due(revoked)
        self._book.forget(revoked)
        self._parking.forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._owned = set(assigned)
        logger.info("commit worker owns %s", ", ".join(str(tp) for tp in sorted(assigned)) or "nothing")

    # fetching ------------------------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        backoff = log_retry()
        while True:
            await self._read_released_again(consumer)
            # The member keeps its place; a broker that is briefly away must not stop the stage.
            fetched = await until_done(
                lambda: consumer.fetch(timeout_ms=500, max_records=500),
                backoff,
                logger,
                "fetching branch work",
            )
            for record in fetched.records:
                tp = TopicPartition(record.topic, record.partition)
                if tp not in self._owned:
                    continue
                try:
                    item = decode_work(record)
                except DecodeError as exc:
                    if not self._parking.wanted(tp, record.offset, None):
                        continue
                    self._book.received(tp, record.offset)
                    logger.warning("branch work %s@%d undecodable, dead-lettered: %s", tp, record.offset, exc)
                    metrics.SKIPPED.labels(metrics.SkipReason.BAD_RECORD).inc()
                    await self._park(record, exc, "undecodable")
                    self._settle_one(tp, record.offset)
                    continue
                key = (item.provider, item.branch)
                if not self._parking.wanted(tp, record.offset, key):
                    continue  # read again for a released branch: handled before
                self._book.received(tp, record.offset)
                if self.refresh_config is not None and not self._knows(item):
                    await self.refresh_config()
                if self._parking.holds(key) or (key not in self._branches and item.provider in self._parked):
                    self._parking.hold(key, tp, record.offset)  # unsettled: read again once it may go on
                    continue
                try:
                    # only the queue is kept: a branch revoked during the next fetch must be
                    # unreferenced when the revocation reclaims its memory (gcpolicy.reclaim)
                    queue = self._branch_for(item, tp).queue
                except UnknownProviderError as exc:
                    await self._park(record, exc, "unknown_provider")
                    self._settle_one(tp, record.offset)
                    continue
                await queue.put(item)

    async def _read_released_again(self, consumer: GroupConsumer) -> None:
        """Move partitions back to the first waiting record of branches whose provider was fixed
        or removed; a partition that cannot be moved (just revoked) leaves it to its next owner."""
        for tp, offset in self._parking.seeks(self._book.next_offset).items():
            if tp not in self._owned:
                continue
            try:
                await consumer.seek(tp, offset)
            except LogError as exc:
                logger.warning("reading %s again from %d failed (its next owner will): %s", tp, offset, exc)
                self._parking.forget([tp])

    def _knows(self, item: WorkItem) -> bool:
        """Whether this process's configuration has the item's provider and target (else it may be
        behind the config topic: a provider or target added live, or a target deleted)."""
        known = item.provider in self._access or item.provider in self._parked
        return known and any(t.name == item.stream.target for t in self.settings.targets)

    def _branch_for(self, item: WorkItem, tp: TopicPartition) -> _Branch:
        key = (item.provider, item.branch)
        branch = self._branches.get(key)
        if branch is not None:
            return branch
        try:
            provider = self.settings.provider(item.provider)
        except KeyError:
            logger.error(
                "branch work %s@%d names provider %r, which is not configured; dead-lettered",
                tp,
                item.offset,
                item.provider,
            )
            metrics.SKIPPED.labels(metrics.SkipReason.UNKNOWN_PROVIDER).inc()
            raise UnknownProviderError(f"provider {item.provider!r} is not configured") from None
        repo = self._access[provider.name].clone(self.clones, provider.name, item.branch, provider.url)
        worker = BranchWorker(
            self.settings,
            provider,
            item.branch,
            repo,
            functools.partial(self._settle_many, tp.topic),
            BranchPorts(
                hook=self._hook,
                history=functools.partial(self._history, tp.topic),
                log_ends=self._log_ends,
                load_state=functools.partial(load_object_state, self.log, self.state_topic),
                on_state=self._hold_states,
                on_result=self._report_result if self.settings.custom_resources.enabled else None,
                reject=functools.partial(self._reject, tp.topic),
                deletion_ahead=functools.partial(self._deletion_ahead, tp.topic),
            ),
        )
        queue = WorkQueue()
        lock = asyncio.Lock()
        task = asyncio.create_task(self._run_branch(worker, queue, lock), name=f"commit-{key[0]}-{key[1]}")
        task.add_done_callback(self._task_done)
        branch = _Branch(worker, queue, task, tp, lock)
        self._branches[key] = branch
        return branch

    async def _history(self, topic: str, partition: int, upto: int) -> list[WorkItem]:
        """The decodable branch-work records of a partition up to `upto`, at most the lookback.

        Best effort: without them a new owner still skips older versions it sees itself.
        """
        tp = TopicPartition(topic, partition)
        found: list[WorkItem] = []
        try:
            first = (await self.log.beginning_offsets([tp]))[tp]
            async with self.log.reader() as reader:
                await reader.assign({tp: max(first, upto - VERSION_LOOKBACK_RECORDS + 1)})
                chunks = read_until(reader, {tp: upto + 1}, timeout_ms=500, idle_fetches=HISTORY_IDLE_ROUNDS)
                async for chunk in chunks:
                    for record in chunk.records:
                        with contextlib.suppress(DecodeError):
                            found.append(decode_work(record))
        except LogError as exc:
            logger.warning("reading %s before offset %d for applied versions failed: %s", tp, upto, exc)
        return found

    async def _deletion_ahead(self, topic: str, item: WorkItem) -> bool:
        """Whether a `TargetDeleted` of `item`'s target follows `item` on its partition, up to today's end.

        The configuration lacks the target, and the version without it is on the log, so its
        `TargetDeleted` (written in the same transaction) is too: if none follows, the deletion is
        behind this record. A log outage is retried: a wrong answer would write a deleted target's
        files back, or lose a live one's records.
        """
        tp = TopicPartition(topic, item.partition)

        async def scan() -> bool:
            end = (await self.log.end_offsets([tp]))[tp]
            async with self.log.reader() as reader:
                await reader.assign({tp: item.offset + 1})
                async for chunk in read_until(reader, {tp: end}, stall_fetches=HISTORY_IDLE_ROUNDS):
                    for record in chunk.records:
                        with contextlib.suppress(DecodeError):
                            found = decode_work(record)
                            if isinstance(found.body, TargetDeleted) and (
                                found.provider,
                                found.branch,
                                found.stream.target,
                            ) == (item.provider, item.branch, item.stream.target):
                                return True
            return False

        what = f"looking for target {item.stream.target}'s deletion on {tp}"
        return await until_done(scan, log_retry(), logger, what)

    async def _report_result(self, result: TargetResult | RequestResult) -> None:
        """Custom-resource mode: the controller shows it in the GitTarget's (or CommitRequest's) status."""
        record = encode_request_result(result) if isinstance(result, RequestResult) else encode_result(result)
        await self.log.append_many(self._config_topic, [record])

    async def _report_credentials(self, report: CredentialsReport) -> None:
        """Custom-resource mode: the controller shows it in the GitProvider's status."""
        await self.log.append_many(self._config_topic, [encode_credentials(report)])

    # dead letters ----------------------------------------------------------------------------
    async def _park(self, record: Record, error: Exception, reason: str) -> None:
        """Append `record`'s dead letter, retrying until the log acknowledges it.

        The caller settles the record's offset only afterwards, so a crash before the letter is
        on the log redelivers the record (and may park it twice: `dead-letter replay` replays a
        record once, whichever of its letters is chosen).
        """
        letter = letter_record(record, self.name, error, int(time.time() * 1000))
        await until_done(
            lambda: self.log.append_many(self._dead_letter_topic, [letter]),
            log_retry(),
            logger,
            f"parking {record.topic}[{record.partition}]@{record.offset} on {self._dead_letter_topic}",
        )
        metrics.DEAD_LETTERED.labels(reason).inc()

    async def _reject(self, topic: str, item: WorkItem, error: Exception) -> None:
        """A branch FIFO cannot apply `item`: park the record it came from (re-read from the log)."""
        record = await self._raw(TopicPartition(topic, item.partition), item.offset)
        if record is None:
            logger.error(
                "branch work %s[%d]@%d cannot be applied and is no longer on the log: %s",
                topic,
                item.partition,
                item.offset,
                error,
            )
            return
        await self._park(record, error, "unappliable")

    async def _raw(self, tp: TopicPartition, offset: int) -> Record | None:
        """The record at `offset` as it is on the log (None once retention deleted it)."""
        backoff = log_retry()
        while True:
            reader = self.log.reader()
            try:
                await reader.assign({tp: offset})
                for _ in range(RAW_READ_IDLE_ROUNDS):
                    fetched = await reader.fetch(timeout_ms=500, max_records=1)
                    for record in fetched.records:
                        return record if record.offset == offset else None
                    if fetched.gaps:
                        return None
                # the record was fetched moments ago: a read that returns nothing is the log's fault
                raise LogUnavailableError(f"no record came back in {RAW_READ_IDLE_ROUNDS} fetches")
            except LogError as exc:
                delay_s = backoff.next_delay_s()
                logger.warning("re-reading %s@%d failed (retry in %.1f s): %s", tp, offset, delay_s, exc)
                await asyncio.sleep(delay_s)
            finally:
                await reader.close()

    async def _log_ends(self) -> dict[int, int]:
        """The log-end offset of every branch-work partition (bounds trusted `Reverser-Offset`s)."""
        partitions = await self.log.partitions_for(self.topic)
        ends = await self.log.end_offsets([TopicPartition(self.topic, p) for p in range(partitions)])
        return {tp.partition: end for tp, end in ends.items()}

    async def _run_branch(
        self, worker: BranchWorker, queue: asyncio.Queue[WorkItem], lock: asyncio.Lock
    ) -> None:
        await worker.run(queue, lock)

    async def _stop_branch(self, key: tuple[str, str], reason: CloseReason) -> None:
        """Stop one branch FIFO; a no-op when a revocation and `stop()` race and the other got there first."""
        branch = self._branches.pop(key, None)
        if branch is None:
            return
        # a FIFO that died (see `_task_done`) is left as it is: its unsettled work is redelivered
        died = task_failure([branch.task]) is not None
        async with branch.lock:
            branch.task.cancel()
        if not died:
            with contextlib.suppress(asyncio.CancelledError):
                await branch.task
        while not branch.queue.empty():
            branch.queue.get_nowait()
        try:
            if not died:
                await branch.worker.stop(reason)
        finally:
            branch.worker.repo.close()

    def _hold_states(self, states: list[PendingRecord]) -> None:
        """Hold object-state records for the next commit round, and wake it: a snapshot's part
        settles no offset, and its records must not wait for the timer (they are its plan's size)."""
        self._state_out.extend(states)
        self._settled.set()

    # offsets -------------------------------------------------------------------------------
    def _settle_one(self, tp: TopicPartition, offset: int) -> None:
        self._book.settle(tp, offset)
        self._settled.set()

    def _settle_many(self, topic: str, offsets: list[Offset]) -> None:
        for partition, offset in offsets:
            self._book.settle(TopicPartition(topic, partition), offset)
        self._settled.set()

    async def _commit_loop(self) -> None:
        while True:
            # Also on a timer: a marker after the last settled record is seen by a later fetch,
            # and without a commit then the group would show a lag of 1 for good.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(MARKER_COMMIT_INTERVAL_S):
                    await self._settled.wait()
            self._settled.clear()
            await self._commit_due()

    async def _commit_due(self, only: set[TopicPartition] | None = None) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        async with self._commit_lock:
            assigned = consumer.assignment()
            scope = assigned if only is None else assigned & only
            due = self._book.due(scope, consumer.committable, consumer.quiet_positions())
            # Taken together with `due` (no await in between): every state of a due offset is in it.
            pending = len(self._state_out)
            if pending:
                if not await self._write_states(pending):
                    return
                if self._hook is not None:
                    await self._hook("state-written")
            if not due:
                return
            try:
                await consumer.commit(due)
            except LogError as exc:
                logger.warning("committing branch-work offsets failed (work will be redelivered): %s", exc)
                return
            self._book.mark_committed(due)
            if self._hook is not None:
                await self._hook("offsets-committed")

    async def _write_states(self, count: int) -> bool:
        """Append the first `count` held object-state records, `STATE_APPEND_RECORDS` at a time.

        A snapshot's commit hands over one record per object; encoding and appending them in one
        call held the event loop for seconds. Each written chunk leaves the queue at once, so a
        failure (returns False; the next commit round retries) writes nothing twice.
        """
        while count:
            chunk = self._state_out[: min(count, STATE_APPEND_RECORDS)]
            try:
                await self.log.append_many(self.state_topic, chunk)
            except LogError as exc:
                logger.warning("writing %d object-state record(s) failed (retried): %s", count, exc)
                return False
            del self._state_out[: len(chunk)]
            count -= len(chunk)
            metrics.STATE_RECORDS.inc(len(chunk))
            await asyncio.sleep(0)
        return True


async def load_object_state(log: Log, topic: str, targets: frozenset[str]) -> list[ObjectState]:
    """The first read of `<prefix>.object-state`, narrowed to `targets` (what a branch already wrote).

    Undecodable records are logged and left out: the next version of that object rewrites its key.
    There is one record per object of the targets, decoded in slices (`pipeline.slices`).
    """
    prefixes = tuple(target_prefix(t) for t in targets)
    if not prefixes:
        return []
    table = TableReader(log, topic, keys=lambda key: key.startswith(prefixes))
    await table.open()
    try:
        snapshot = await table.first_read()
    finally:
        await table.close()
    found: list[ObjectState] = []
    slicer = Slicer()
    for record in snapshot.records.values():
        if slicer.due():
            await slicer.pause()
        try:
            found.append(decode_state(record))
        except DecodeError as exc:
            logger.warning("object-state %s@%d undecodable, ignored: %s", record.key, record.offset, exc)
    return found
