"""The set of running watch streams, reconciled against the configuration incrementally.

A configuration change starts and stops only the streams whose identity (`StreamSpec`) changed;
every other stream keeps its connection, cursor and epoch, so it neither replays nor snapshots.
A type that discovery briefly stops serving does not stop a running stream of an unchanged
target; only a configuration change or a vanished namespace does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pipeline.codec.stream_report import ReportedStream, StreamReport, encode_report
from pipeline.config import CLUSTER_DEFAULTS, ClusterSettings, Settings, TargetSettings
from pipeline.incarnation import Incarnation
from pipeline.kube.client import ApiResource, KubeClient, KubeError, open_client
from pipeline.kube.kubeconfigsecret import KubeconfigSecretError, with_kubeconfig_secrets
from pipeline.kube.lease import LeaseElector, LeaseTerms
from pipeline.kube.roster import Roster
from pipeline.log.api import Log, LogError
from pipeline.log.topics import TopicNames
from pipeline.sealing import Sealer, SealingError, sealer_for
from pipeline.tasks import cancel_all
from pipeline.watch import metrics
from pipeline.watch.claims import ClaimWatcher
from pipeline.watch.cursors import CursorStore
from pipeline.watch.metrics import StreamState
from pipeline.watch.plan import desired_streams, plan_streams
from pipeline.watch.resolve import RuleProblem, StreamSpec, resolve_target
from pipeline.watch.shards import ShardStanding, shard_key, shard_lease_name, shard_of
from pipeline.watch.stream import ClusterCapabilities, StreamOptions, WatchStream
from pipeline.watch.writer import FencedWriter, watch_transactional_id

__all__ = ["ClientFactory", "WatchManager"]

logger = logging.getLogger(__name__)

ClientFactory = Callable[[ClusterSettings], Awaitable[KubeClient]]
#: How often a led cluster's streams are compared with the last stream report (custom resources).
REPORT_INTERVAL_S = 0.5


def _sealers(settings: Settings) -> tuple[dict[str, Sealer], dict[str, str]]:
    """The sealer of every target with encryption, and why a target has none (its digest key
    variable unset, no `sops`). Such a target is not watched, so nothing of it is written
    unencrypted, and never a reason to stop: the configuration may come from a tenant's GitTarget,
    and every other target goes on."""
    sealers: dict[str, Sealer] = {}
    unsealable: dict[str, str] = {}
    for target in settings.targets:
        try:
            sealer = sealer_for(target)
        except SealingError as exc:
            unsealable[target.name] = str(exc)
            continue
        if sealer is not None:
            sealers[target.name] = sealer
    return sealers, unsealable


@dataclass(slots=True)
class _Shard:
    """One shard of a cluster's watch: its Lease (with leader election) and fencing producer."""

    index: int
    key: str
    elector: LeaseElector | None = None
    election: asyncio.Task[None] | None = None
    writer: FencedWriter | None = None

    @property
    def leading(self) -> bool:
        """Whether this replica may watch the shard (always, without leader election)."""
        return self.elector is None or self.elector.leading

    @property
    def writable(self) -> bool:
        """Leading, and (with leader election) holding the shard's fencing producer."""
        return self.leading and (self.elector is None or self.writer is not None)

    async def close_writer(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                await writer.close()
            except LogError as exc:
                logger.warning("closing the fenced writer of %s failed: %s", self.key, exc)

    async def close(self) -> None:
        """End the election (releasing the Lease) and the producer; streams must be stopped."""
        if self.election is not None:
            await cancel_all([self.election])
            self.election = None
        await self.close_writer()
        if self.elector is not None:
            await self.elector.release()


@dataclass(slots=True)
class _Cluster:
    settings: ClusterSettings
    client: KubeClient
    capabilities: ClusterCapabilities
    shards: list[_Shard] = field(default_factory=list)
    roster: Roster | None = None
    roster_task: asyncio.Task[None] | None = None

    @property
    def leading(self) -> bool:
        """Whether this replica watches some shard of the cluster."""
        return any(shard.leading for shard in self.shards)

    def shard_for(self, spec: StreamSpec) -> _Shard:
        """The shard whose leader runs `spec` (by its group/resource)."""
        return self.shards[shard_of(spec.stream.group, spec.stream.resource, len(self.shards))]

    async def close(self) -> None:
        """End the elections (releasing the Leases), the roster and the connection."""
        for shard in self.shards:
            await shard.close()
        if self.roster_task is not None:
            await cancel_all([self.roster_task])
            self.roster_task = None
        if self.roster is not None:
            await self.roster.release()
        await self.client.close()


class WatchManager:
    """Owns the cluster clients, the cursor store and one `WatchStream` per `StreamSpec`."""

    def __init__(
        self,
        settings: Settings,
        log_: Log,
        *,
        options: StreamOptions | None = None,
        client_factory: ClientFactory = open_client,
        identity: str | None = None,
    ) -> None:
        names = TopicNames.for_prefix(settings.log.topic_prefix)
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # the replica's record of what it holds, for a restart after a crash (given by the service)
        self.incarnation: Incarnation | None = None
        self._leadership: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._fenced: set[tuple[str, int]] = set()
        self._leadership_worker: asyncio.Task[None] | None = None
        self._log = log_
        self._topic = names.watch_events
        self._config_topic = names.config
        self._reported: dict[str, tuple[ReportedStream, ...]] = {}
        self._reporter: asyncio.Task[None] | None = None
        self.cursors = CursorStore(log_, names.watch_cursors)
        self._options = options
        self._client_factory = with_kubeconfig_secrets(
            client_factory, settings.resources_cluster if settings.clusters else None
        )
        self._settings = settings
        self._targets: dict[str, TargetSettings] = {}
        self._sealers, self._unsealable = _sealers(settings)
        self._clusters: dict[str, _Cluster] = {}
        self.streams: dict[StreamSpec, WatchStream] = {}
        self.problems: list[RuleProblem] = []
        self._lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None
        self.started = False
        intervals = [c.watch_claim_interval_s for c in settings.clusters]
        self.claims = ClaimWatcher(
            log_,
            names.watch_claims,
            self.identity,
            self._watched,
            interval_s=min(intervals, default=CLUSTER_DEFAULTS.watch_claim_interval_s),
        )
        metrics.register_source(self)

    async def start(self) -> None:
        """Load cursors, declare the configured streams, then re-discover periodically."""
        await self.cursors.load()
        self._leadership_worker = asyncio.create_task(self._follow_leadership(), name="watch leadership")
        await self.apply(self._settings)
        self._refresh = asyncio.create_task(self._refresh_loop(), name="watch rediscovery")
        if self._settings.custom_resources.enabled:
            self._reporter = asyncio.create_task(self._report_loop(), name="watch stream reports")
        await self.claims.start()
        self.started = True

    def _watched(self) -> Mapping[str, bool]:
        """Shards (`shard_key`: a cluster's name when unsharded) this process watches now (it leads
        them and runs streams), with their election mode."""
        running = {
            self._clusters[spec.stream.cluster].shard_for(spec).key
            for spec in self.streams
            if spec.stream.cluster in self._clusters
        }
        return {
            shard.key: cluster.settings.leader_election
            for cluster in self._clusters.values()
            for shard in cluster.shards
            if shard.leading and shard.key in running
        }

    async def _follow_leadership(self) -> None:
        """Start a shard's streams when this replica wins its Lease, stop them when it loses it."""
        while True:
            name, index = await self._leadership.get()
            try:
                async with self._lock:
                    cluster = self._clusters.get(name)
                    if cluster is None or index >= len(cluster.shards):
                        continue
                    await self._leadership_changed_locked(cluster, cluster.shards[index])
            except Exception:
                logger.exception("following the leadership of cluster %s shard %d failed", name, index)

    async def _leadership_changed_locked(self, cluster: _Cluster, shard: _Shard) -> None:
        name = cluster.settings.name
        if (name, shard.index) in self._fenced and shard.elector is not None:
            self._fenced.discard((name, shard.index))
            metrics.FENCED.labels(name).inc()
            logger.warning("%s: a newer leader fenced this replica's writes; it stops watching", shard.key)
            shard.elector.step_down()
        if shard.leading:
            # Fence every earlier leader first, then read the cursors it left: nothing it still
            # holds can land after them.
            await self._take_writer(shard)
            await self.cursors.load()
            await self._apply_locked(self._settings)
            return
        mine = [
            spec for spec in self.streams if spec.stream.cluster == name and cluster.shard_for(spec) is shard
        ]
        await asyncio.gather(*(self.streams.pop(spec).stop() for spec in mine))
        for spec in mine:
            metrics.STREAM_STOPS.labels(spec.stream.target, "leadership_lost").inc()
        await shard.close_writer()
        if shard.elector is not None and shard.elector.handing_over:
            # the shard moves to the replica the roster now assigns it to: hand the Lease over now
            logger.info("%s: handed over to the replica it is assigned to", shard.key)
            await shard.elector.release()

    async def _take_writer(self, shard: _Shard) -> None:
        """Start the shard's fencing producer (leader election only); on failure, step down."""
        if shard.elector is None:
            return
        await shard.close_writer()
        writer = FencedWriter(
            self._log,
            watch_transactional_id(self._settings.log.topic_prefix, shard.key),
            self.identity,
        )
        try:
            await writer.start()
        except LogError as exc:
            logger.warning("%s: cannot take the fencing producer (%s); retrying", shard.key, exc)
            shard.elector.step_down()
            return
        shard.writer = writer

    def _fenced_by_successor(self, name: str, index: int) -> Callable[[], None]:
        def notify() -> None:
            self._fenced.add((name, index))
            self._leadership.put_nowait((name, index))

        return notify

    def _leadership_changed(self, name: str, index: int) -> Callable[[], Awaitable[None]]:
        async def notify() -> None:
            self._leadership.put_nowait((name, index))

        return notify

    async def _refresh_loop(self) -> None:
        """Pick up types that appear later (a CRD installed after start) and retry failed discovery."""
        while True:
            intervals = [c.watch_rediscover_s for c in self._settings.clusters]
            await asyncio.sleep(min(intervals, default=CLUSTER_DEFAULTS.watch_rediscover_s))
            try:
                await self.apply(self._settings)
            except Exception:
                logger.exception("watch rediscovery failed; trying again next interval")

    def _reports_due(self) -> list[tuple[_Shard, tuple[ReportedStream, ...]]]:
        """Led shards whose streams (or their states) differ from what was last reported."""
        due = []
        for cluster in self._clusters.values():
            for shard in cluster.shards:
                if not shard.writable:
                    continue
                entries = tuple(
                    sorted(
                        ReportedStream(
                            spec.identity,
                            stream.state == StreamState.STREAMING,
                            f"{stream.state}: {stream.reason}",
                        )
                        for spec, stream in self.streams.items()
                        if spec.stream.cluster == cluster.settings.name and cluster.shard_for(spec) is shard
                    )
                )
                if self._reported.get(shard.key) != entries:
                    due.append((shard, entries))
        return due

    async def _report_loop(self) -> None:
        """Custom-resource mode: tell the controller (through the config topic) which streams run.

        A rule's `Reconciling` condition is True until every stream it resolved to is streaming;
        only the replica leading a shard knows, and it writes through the shard's fenced producer,
        so a deposed leader cannot report streams it no longer runs. A sharded cluster reports per
        shard (`<cluster>/shard-<n>`).
        """
        while True:
            await asyncio.sleep(REPORT_INTERVAL_S)
            for shard, entries in self._reports_due():
                report = StreamReport(shard.key, int(time.time() * 1000), entries)
                try:
                    await (shard.writer or self._log).append_many(self._config_topic, [encode_report(report)])
                except LogError as exc:
                    logger.warning("reporting the streams of %s failed (retrying): %s", shard.key, exc)
                    continue
                self._reported[shard.key] = entries

    async def stop(self) -> None:
        await self.claims.stop()
        for task in (self._refresh, self._leadership_worker, self._reporter):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._refresh = self._leadership_worker = self._reporter = None
        async with self._lock:
            await asyncio.gather(*(stream.stop() for stream in self.streams.values()))
            for spec in self.streams:
                metrics.STREAM_STOPS.labels(spec.stream.target, "shutdown").inc()
            self.streams.clear()
            self.problems = []
            for cluster in self._clusters.values():
                await cluster.close()
            self._clusters.clear()

    async def apply(self, settings: Settings) -> tuple[int, int]:
        """Reconcile the running streams with `settings`; returns (started, stopped)."""
        async with self._lock:
            return await self._apply_locked(settings)

    async def _apply_locked(self, settings: Settings) -> tuple[int, int]:
        self._sealers, self._unsealable = _sealers(settings)
        clusters = {c.name: c for c in settings.clusters}
        wanted = {t.cluster for t in settings.targets if t.rules and t.cluster in clusters}
        failed, retired = await self._sync_clusters({name: clusters[name] for name in wanted})
        desired, problems = await self._desired(settings, failed)
        plan = plan_streams(
            self.streams,
            desired,
            retired_clusters=set(retired),
            writable=lambda spec: self._clusters[spec.stream.cluster].shard_for(spec).writable,
            previous_targets=self._targets,
            targets=settings.targets,
        )
        await asyncio.gather(*(self.streams.pop(spec).stop() for spec in plan.stop + plan.restart))
        for old_cluster in retired.values():
            await old_cluster.close()
        for spec in plan.stop + plan.restart:
            metrics.STREAM_STOPS.labels(spec.stream.target, plan.stop_reason(spec)).inc()
        for spec in plan.start:
            metrics.STREAM_STARTS.labels(spec.stream.target).inc()
            cluster = self._clusters[spec.stream.cluster]
            shard = cluster.shard_for(spec)
            sealer = self._sealers.get(spec.stream.target)
            stream = WatchStream(
                spec,
                cluster.client,
                shard.writer or self._log,
                self._topic,
                self.cursors,
                self._options or StreamOptions.of(settings, cluster.settings),
                cluster.capabilities,
                fresh=spec.cursor_key in plan.fresh,
                sealer=sealer if sealer is not None and sealer.applies_to(spec.group_resource) else None,
                on_fenced=self._fenced_by_successor(spec.stream.cluster, shard.index),
            )
            self.streams[spec] = stream
            stream.start()
        await self._forget_cursors(set(plan.forget))
        await asyncio.gather(*(self.streams[spec].resnapshot() for spec in plan.resnapshot))
        for problem in problems:
            if problem not in self.problems:
                logger.warning(
                    "target %s rule %d: %s not watched (%s): %s",
                    problem.target,
                    problem.rule,
                    problem.resource,
                    problem.reason,
                    problem.message,
                )
        self.problems = problems
        self._settings = settings
        self._targets = {t.name: t for t in settings.targets}
        stopped = len(plan.stop) + len(plan.restart)
        if plan.start or stopped:
            logger.info(
                "watch streams: %d started, %d stopped, %d running",
                len(plan.start),
                stopped,
                len(self.streams),
            )
        return len(plan.start), stopped

    async def _forget_cursors(self, keys: set[str]) -> None:
        """Tombstone the cursors of streams that are gone, so re-adding one starts with a snapshot."""
        for key in sorted(keys):
            try:
                await self.cursors.delete(key)
            except LogError as exc:
                logger.warning("could not remove the cursor of %s: %s", key, exc)

    async def _desired(
        self, settings: Settings, failed: dict[str, str]
    ) -> tuple[set[StreamSpec], list[RuleProblem]]:
        desired: set[StreamSpec] = set()
        problems: list[RuleProblem] = []
        discovered_by_cluster: dict[str, dict[tuple[str, str], ApiResource]] = {}
        for name, cluster in self._clusters.items():
            try:
                discovered_by_cluster[name] = await cluster.client.discover()
            except KubeError as exc:
                logger.warning("discovery on cluster %s failed: %s", name, exc)
        for target in settings.targets:
            if not target.rules:
                continue
            client = self._clusters.get(target.cluster)
            if target.name in self._unsealable:
                problems.append(
                    RuleProblem(target.name, 0, "*", "EncryptionUnavailable", self._unsealable[target.name])
                )
                continue
            if target.cluster in failed:
                problems.append(
                    RuleProblem(target.name, 0, "*", "ClusterConfigError", failed[target.cluster])
                )
                continue
            if client is None:
                problems.append(
                    RuleProblem(target.name, 0, "*", "UnknownCluster", f"no cluster {target.cluster!r}")
                )
                continue
            previous = self._targets.get(target.name)
            discovered = discovered_by_cluster.get(target.cluster)
            if discovered is None:
                problems.append(
                    RuleProblem(
                        target.name, 0, "*", "DiscoveryFailed", f"cluster {target.cluster} unreachable"
                    )
                )
                desired |= desired_streams(target, previous, self.streams, None)
                continue
            specs, target_problems = resolve_target(target, client.settings, discovered)
            desired |= desired_streams(target, previous, self.streams, specs)
            problems.extend(target_problems)
        return desired, problems

    async def _sync_clusters(
        self, wanted: dict[str, ClusterSettings]
    ) -> tuple[dict[str, str], dict[str, _Cluster]]:
        """Open clients for new clusters and replace changed ones.

        Returns the clusters whose client could not be loaded (with the reason) and the retired
        clients, which the caller closes once the streams using them are stopped.
        """
        retired: dict[str, _Cluster] = {}
        for name in list(self._clusters):
            current = self._clusters[name]
            if wanted.get(name) != current.settings:
                retired[name] = current
                del self._clusters[name]
        failed: dict[str, str] = {}
        for name, cluster_settings in wanted.items():
            if name in self._clusters:
                continue
            try:
                client = await self._client_factory(cluster_settings)
            except KubeconfigSecretError as exc:
                failed[name] = f"cannot load the client configuration: {exc}"
                logger.error("cluster %s: %s", name, failed[name])
                continue
            except Exception as exc:  # kubeconfig loaders raise many types for a bad file
                source = (
                    "in-cluster service account"
                    if cluster_settings.in_cluster
                    else cluster_settings.kubeconfig
                )
                failed[name] = f"cannot load the client configuration ({source}): {exc}"
                logger.error("cluster %s: %s", name, failed[name])
                continue
            cluster = _Cluster(cluster_settings, client, ClusterCapabilities())
            self._elect(cluster)
            self._clusters[name] = cluster
        return failed, retired

    def _elect(self, cluster: _Cluster) -> None:
        """Give the cluster its shards, and with leader election a Lease election for each (and a
        roster of the live replicas, which deals a sharded cluster's shards out)."""
        settings = cluster.settings
        name, count = settings.name, settings.watch_shards
        if not settings.leader_election:
            cluster.shards = [_Shard(0, name)]
            return
        predecessor = ""
        if self.incarnation is not None:
            predecessor = self.incarnation.predecessor_lease_identity
            self.incarnation.holds_leases_as(self.identity)
        terms = LeaseTerms.of_cluster(cluster.client, settings, self.identity, predecessor)
        base = settings.effective_lease_name
        if count > 1:
            cluster.roster = Roster(terms, base)
            cluster.roster_task = asyncio.create_task(cluster.roster.run(), name=f"watch roster {name}")
        for index in range(count):
            shard = _Shard(index, shard_key(name, index, count))
            roster = cluster.roster
            shard.elector = LeaseElector(
                terms,
                shard_lease_name(base, index, count),
                standing=None
                if roster is None
                else ShardStanding(
                    self.identity,
                    base,
                    index,
                    count,
                    settings.lease_duration_s,
                    roster.members,
                    roster.listed,
                ),
            )
            changed = self._leadership_changed(name, index)
            shard.election = asyncio.create_task(
                shard.elector.run(changed, changed), name=f"watch lease {shard.key}"
            )
            cluster.shards.append(shard)

    # -- metrics ---------------------------------------------------------------------------
    def stream_views(self) -> Iterable[WatchStream]:
        return list(self.streams.values())

    def shards_led(self) -> Iterable[tuple[str, int, int]]:
        """(cluster, shards this replica leads, shards in all) of each cluster; leading any of them
        is what `reverser_watch_leader` reports.

        A shard counts once its fencing producer is held (`writable`), not when its Lease is won:
        until then an earlier leader, paused past its Lease, may still get writes acknowledged, so
        a replica reporting the shard earlier would claim a fence that is not yet up.
        """
        return [
            (name, sum(shard.writable for shard in cluster.shards), len(cluster.shards))
            for name, cluster in sorted(self._clusters.items())
        ]

    def concurrent_watchers(self) -> Iterable[tuple[str, int]]:
        return sorted(self.claims.rival_counts().items())

    def problem_reasons(self) -> Iterable[tuple[str, str]]:
        return [(p.target, p.reason) for p in self.problems]
