"""Transactions on the embedded log: fencing per transactional id, all-or-nothing writes across a crash."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import Counter

from pipeline.log.api import (
    AppendResult,
    FencedError,
    GroupOffsets,
    LogError,
    Placement,
    TopicPartition,
    TransactionalProducer,
)
from pipeline.log.embedded.files import DAMAGED_FILES, group_offsets_of, read_json, write_json
from pipeline.log.embedded.segments import fsync_directory
from pipeline.log.embedded.syncing import in_thread
from pipeline.log.faults import crash_point

if TYPE_CHECKING:
    from pipeline.log.embedded.log import EmbeddedLog

logger = logging.getLogger(__name__)


FENCED_WRITES = Counter(
    "reverser_log_embedded_fenced_writes",
    "Transactions refused because a newer producer with the same transactional id had started.",
)


ROLLED_BACK_RECORDS = Counter(
    "reverser_log_embedded_rolled_back_records",
    "Records of transactions that a crash interrupted before their commit point, removed on open.",
)


class EmbeddedTransactionalProducer(TransactionalProducer):
    """Fencing within the one process: each `start()` takes a newer epoch of the id."""

    def __init__(self, log: EmbeddedLog, transactional_id: str) -> None:
        super().__init__(log, transactional_id)
        self._log = log
        self._epoch: int | None = None

    async def start(self) -> None:
        if self._epoch is None:
            self._epoch = self._log.fence(self.transactional_id)

    async def _commit(self, placements: list[Placement], offsets: GroupOffsets | None) -> list[AppendResult]:
        if self._epoch is None:
            raise LogError(f"transactional producer {self.transactional_id!r} is not started")
        # Once begun, a commit runs to its end (as the synchronous one did): a caller cancelled
        # meanwhile waits for it, so no transaction stops halfway in a running process.
        work = asyncio.ensure_future(
            commit_transaction(self._log, self.transactional_id, self._epoch, placements, offsets)
        )
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await work
            raise

    async def close(self) -> None:
        self._epoch = None


async def commit_transaction(
    log: EmbeddedLog,
    transactional_id: str,
    epoch: int,
    placements: list[Placement],
    offsets: GroupOffsets | None,
) -> list[AppendResult]:
    """Write a transaction all or nothing, across a crash at any point, without holding the loop.

    Every fsync runs in a worker thread. One transaction at a time; its partitions are held
    (`EmbeddedLog.holding`) from before its intent until its commit point, so no reader sees part
    of it and no append written after it is acknowledged before that point. Across a crash, an
    intent file decides: written (and fsynced) as `prepared` (with each partition's end offset)
    before the records, replaced by `committed` (with the group offsets) once they are durable:
    the commit point. Opening the log rolls a `prepared` transaction back and completes a
    `committed` one (`recover_transactions`). Returns once the records and offsets are durable.
    Records and offsets arrive checked (`TransactionalProducer.commit`).
    """
    log.require_started()
    async with log.transaction_lock:
        newest = log.epoch(transactional_id)
        if newest != epoch:
            FENCED_WRITES.inc()
            raise FencedError(
                f"transactional id {transactional_id!r}: a newer producer (epoch "
                f"{newest}) has started; this one (epoch {epoch}) is fenced"
            )
        placed = [log.placed(placement) for placement in placements]
        intent_path = log.directory / "transactions" / f"{urllib.parse.quote(transactional_id, safe='')}.json"
        with log.holding(placed):
            if placed:
                ends = [
                    [p.topic.spec.name, number, p.topic.partitions[number].next_offset]
                    for p in placed
                    for number in p.by_partition
                ]
                await in_thread(write_json, intent_path, {"state": "prepared", "truncate": ends}, log.fsync)
                crash_point("embedded-transaction-prepared")
            results = await log.write_durably(placed)
            if offsets is None:
                await in_thread(forget_intent, intent_path, log.fsync)
                return results
            crash_point("embedded-transaction-written")
            entries = [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.offsets.items())]
            if placed:
                committed = {"state": "committed", "group": offsets.group_id, "offsets": entries}
                await in_thread(write_json, intent_path, committed, log.fsync)
                crash_point("embedded-transaction-committed")
        await log.persist_group_offsets(offsets.group_id, offsets.offsets)
        await in_thread(forget_intent, intent_path, log.fsync)
        return results


def forget_intent(path: Path, fsync: bool) -> None:
    """Remove a finished transaction's intent durably, so a power loss cannot replay it later."""
    if path.exists():
        path.unlink()
        if fsync:
            fsync_directory(path.parent)


def recover_transactions(log: EmbeddedLog) -> None:
    """Finish what a crash interrupted: roll back before the commit point, complete after it."""
    txn_dir = log.directory / "transactions"
    txn_dir.mkdir(exist_ok=True)
    for path in sorted(txn_dir.glob("*.json")):
        try:
            intent = read_json(path)
            state = intent["state"]
            if state == "prepared":
                for topic, partition, end in intent["truncate"]:
                    removed = log.partition(TopicPartition(topic, partition)).truncate_to(int(end))
                    ROLLED_BACK_RECORDS.inc(removed)
                    logger.warning(
                        "embedded log: rolled back %d records of an unfinished transaction on %s[%d]",
                        removed,
                        topic,
                        partition,
                    )
            elif state == "committed":
                log.store_group_offsets(str(intent["group"]), group_offsets_of(intent))
            else:
                raise ValueError(f"unknown state {state!r}")
        except (OSError, ValueError, KeyError, TypeError, LogError) as exc:
            DAMAGED_FILES.labels("transaction").inc()
            logger.error("embedded log: transaction file %s unusable (%s); discarded", path, exc)
        path.unlink()
