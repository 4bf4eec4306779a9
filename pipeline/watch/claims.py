"""Two watchers of one source cluster are detected, not silently doubled.

Leader election makes one replica watch each cluster. Without it (or with a paused leader that
resumes after its successor took over) two processes can watch the same cluster, and every change
and snapshot reaches the log twice. Each watcher therefore appends a claim, its heartbeat, to the
one-partition `<prefix>.watch-claims` topic every interval while it watches a cluster, and reads
everybody's claims. A claim by another identity written *after* this watcher's own first claim for
the cluster proves the two run at the same time: judged by log offsets, so no clock is compared
and a restarted watcher (a new identity whose claims all follow the old one's) is no rival. A
rival drops out once its newest claim is more than `RIVAL_EXPIRY_INTERVALS` of its own intervals
older than the newest claim on the topic (broker append times only).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline.backoff import log_retry
from pipeline.codec import DecodeError
from pipeline.codec.watch_claim import Claim, decode_claim, encode_claim
from pipeline.log.api import Log, LogError, Reader, TopicPartition
from pipeline.log.retrying import until_done
from pipeline.tasks import cancel_all
from pipeline.watch import metrics

__all__ = ["RIVAL_EXPIRY_INTERVALS", "ClaimBook", "ClaimWatcher"]

logger = logging.getLogger(__name__)

RIVAL_EXPIRY_INTERVALS = 3
_FETCH_TIMEOUT_MS = 500


@dataclass(slots=True)
class _Seen:
    claim: Claim
    offset: int
    timestamp_ms: int


class ClaimBook:
    """The pure decision: which other watchers of a cluster run at the same time as this one."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self._since: dict[str, int] = {}
        self._others: dict[tuple[str, str], _Seen] = {}
        self._newest_ms = 0

    def clusters(self) -> list[str]:
        """The clusters this watcher has claimed since it began watching them."""
        return sorted(self._since)

    def started(self, cluster: str, offset: int) -> None:
        """Our first claim for `cluster` since we began watching it landed at `offset`."""
        self._since.setdefault(cluster, offset)

    def stopped(self, cluster: str) -> None:
        self._since.pop(cluster, None)

    def observe(self, claim: Claim, offset: int, timestamp_ms: int) -> None:
        """A claim read from the topic (our own ones only move the topic's clock)."""
        self._newest_ms = max(self._newest_ms, timestamp_ms)
        if claim.identity == self.identity:
            return
        self._others[(claim.cluster, claim.identity)] = _Seen(claim, offset, timestamp_ms)

    def rivals(self, cluster: str) -> list[Claim]:
        """Other watchers of `cluster` that claimed it after we started and are still claiming."""
        since = self._since.get(cluster)
        if since is None:
            return []
        found = []
        for (name, _), seen in sorted(self._others.items()):
            expired = self._newest_ms - seen.timestamp_ms > RIVAL_EXPIRY_INTERVALS * seen.claim.interval_ms
            if name == cluster and seen.offset > since and not expired:
                found.append(seen.claim)
        return found


class ClaimWatcher:
    """Writes this process's claims and reads everybody's; reports rivals (log + metrics).

    `watched()` returns the clusters this process watches right now, with whether it uses leader
    election for them.
    """

    def __init__(
        self,
        log_: Log,
        topic: str,
        identity: str,
        watched: Callable[[], Mapping[str, bool]],
        *,
        interval_s: float,
    ) -> None:
        self._log = log_
        self._tp = TopicPartition(topic, 0)
        self._watched = watched
        self.interval_s = interval_s
        self.book = ClaimBook(identity)
        self._reported: set[tuple[str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        start_at = (await self._log.end_offsets([self._tp]))[self._tp]
        reader = self._log.reader()
        await reader.assign({self._tp: start_at})
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name="watch claims"),
            asyncio.create_task(self._read_loop(reader), name="watch claim reader"),
        ]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks = []

    def rival_counts(self) -> dict[str, int]:
        """Cluster → number of other watchers running at the same time (clusters we watch)."""
        return {cluster: len(self.book.rivals(cluster)) for cluster in self._watched()}

    async def _claim_loop(self) -> None:
        while True:
            await self.claim_once()
            await asyncio.sleep(self.interval_s)

    async def claim_once(self) -> None:
        """Append one claim per watched cluster; forget clusters no longer watched."""
        watched = dict(self._watched())
        for cluster in self.book.clusters():
            if cluster not in watched:
                self.book.stopped(cluster)
        interval_ms = int(self.interval_s * 1000)
        for cluster, elected in sorted(watched.items()):
            claim = Claim(cluster, self.book.identity, elected, interval_ms)
            record = encode_claim(claim)
            try:
                result = await self._log.append(
                    self._tp.topic, record.value, key=record.key, headers=record.headers, partition=0
                )
            except LogError as exc:
                logger.warning("watch claim for cluster %s not written: %s", cluster, exc)
                continue
            metrics.CLAIMS.labels("written").inc()
            self.book.started(cluster, result.offset)

    async def _read_loop(self, reader: Reader) -> None:
        backoff = log_retry()
        try:
            while True:
                fetched = await until_done(
                    lambda: reader.fetch(timeout_ms=_FETCH_TIMEOUT_MS),
                    backoff,
                    logger,
                    "reading watch claims",
                )
                for record in fetched.records:
                    try:
                        claim = decode_claim(record)
                    except DecodeError as exc:
                        logger.warning(
                            "skipping undecodable watch claim at offset %d: %s", record.offset, exc
                        )
                        continue
                    metrics.CLAIMS.labels("read").inc()
                    self.book.observe(claim, record.offset, record.timestamp_ms)
                self._report()
        finally:
            await reader.close()

    def _report(self) -> None:
        for cluster in self._watched():
            for rival in self.book.rivals(cluster):
                if (cluster, rival.identity) in self._reported:
                    continue
                self._reported.add((cluster, rival.identity))
                metrics.CONCURRENT_WATCHERS_DETECTED.labels(cluster).inc()
                logger.error(
                    "cluster %s is also watched by %s (leader election %s there, %s here): every change "
                    "is written to the log twice; run one watcher per cluster or turn leader_election on",
                    cluster,
                    rival.identity,
                    "on" if rival.leader_election else "off",
                    "on" if self._watched().get(cluster) else "off",
                )
