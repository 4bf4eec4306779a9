"""Leader election per source cluster on a `coordination.k8s.io/v1` Lease.

Several replicas may run the service; only the holder of a cluster's Lease watches that cluster,
so each change is written to the log once. Expiry is judged the way client-go judges it: by how
long this process has seen the same lease record unchanged on its own clock, never by comparing
another process's timestamps with ours, so clock skew cannot split the brain.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pipeline.backoff import Sleep
from pipeline.config import ClusterSettings
from pipeline.kube.client import KubeClient, KubeError

__all__ = [
    "POD_NAMESPACE_ENV",
    "SERVICE_ACCOUNT_NAMESPACE_FILE",
    "LeaseElector",
    "LeaseTerms",
    "Standing",
    "lease_namespace",
    "micro_time",
]

logger = logging.getLogger(__name__)

# The pod's namespace, as the chart passes it through the downward API ...
POD_NAMESPACE_ENV = "POD_NAMESPACE"
# ... and as every pod with a mounted service account token finds it on disk.
SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
FALLBACK_LEASE_NAMESPACE = "default"


def lease_namespace(
    configured: str | None,
    environ: Mapping[str, str] | None = None,
    namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE,
) -> str:
    """Where a cluster's Lease lives: the configured namespace, else the pod's own namespace.

    A service account is usually granted Lease rights only in its own namespace, so defaulting to
    the pod's namespace (not `default`) is what makes leader election work without extra RBAC.
    Outside a pod (no POD_NAMESPACE, no service account file) the fallback is `default`.
    """
    if configured:
        return configured
    env = os.environ if environ is None else environ
    from_env = env.get(POD_NAMESPACE_ENV, "").strip()
    if from_env:
        return from_env
    try:
        from_file = namespace_file.read_text(encoding="utf-8").strip()
    except OSError:
        from_file = ""
    if from_file:
        return from_file
    logger.warning(
        "no lease_namespace configured and neither %s nor %s gives the pod's namespace; using %r",
        POD_NAMESPACE_ENV,
        namespace_file,
        FALLBACK_LEASE_NAMESPACE,
    )
    return FALLBACK_LEASE_NAMESPACE


class Standing(Protocol):
    """Whether this replica should hold a Lease at all (a watch shard's assignment), asked each round.

    Without one, an elector takes any vacant Lease and keeps it while it can renew (one Lease per
    cluster). With one, it takes a vacant Lease only when `may_take` agrees (given how long this
    replica has seen the Lease vacant, in seconds) and stops renewing once `may_keep` says no, so
    the owner can stop its work and `release` the Lease to the replica that should hold it.
    """

    def may_take(self, vacant_s: float) -> bool: ...

    def may_keep(self) -> bool: ...


def micro_time(seconds: float) -> str:
    """A Lease's MicroTime field (`renewTime`, `acquireTime`) for a wall-clock moment."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseTerms:
    """What every Lease a replica keeps on one cluster shares, whether it elects a leader
    (`LeaseElector`) or marks the replica alive (`pipeline.kube.roster.Roster`): where the Leases
    are, whom they name, how long they last, and the clocks expiry is judged by."""

    client: KubeClient
    namespace: str
    identity: str
    duration_s: float
    renew_s: float
    #: the identity this replica's crashed previous run held its Leases under
    #: (pipeline.incarnation): a Lease it still holds is taken at once, as a released one would be
    predecessor: str = ""
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    sleep: Sleep = asyncio.sleep

    @classmethod
    def of_cluster(
        cls, client: KubeClient, cluster: ClusterSettings, identity: str, predecessor: str = ""
    ) -> LeaseTerms:
        """The terms a cluster's settings give: its Lease namespace (`lease_namespace`), duration
        and renew interval."""
        return cls(
            client,
            lease_namespace(cluster.lease_namespace),
            identity,
            duration_s=cluster.lease_duration_s,
            renew_s=cluster.lease_renew_s,
            predecessor=predecessor,
        )

    @property
    def duration_seconds(self) -> int:
        """`duration_s` as a Lease's `leaseDurationSeconds` (whole seconds, at least 1)."""
        return max(1, round(self.duration_s))

    @property
    def collection(self) -> str:
        """The Leases' collection path in the namespace."""
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"


class LeaseElector:
    """Acquires and renews one Lease; tells its owner when leadership starts and ends."""

    def __init__(self, terms: LeaseTerms, name: str, *, standing: Standing | None = None) -> None:
        self.terms = terms
        self.name = name
        self._path = f"{terms.collection}/{name}"
        self._standing = standing
        self._observed: tuple[str, float] | None = None  # (record resourceVersion, when seen)
        self._last_renewed = float("-inf")
        self._vacant_since: float | None = None
        self.leading = False
        #: The last round gave the Lease up because `standing` said so; the owner releases it once
        #: its work has stopped.
        self.handing_over = False

    async def run(
        self, on_started: Callable[[], Awaitable[None]], on_stopped: Callable[[], Awaitable[None]]
    ) -> None:
        """Try to acquire or renew every `renew_s`; call the callbacks on each change.

        Cancelling `run` ends leadership without calling `on_stopped`: the owner that cancels it
        stops its own work, then calls `release`.
        """
        try:
            while True:
                try:
                    held = await self._try_acquire_or_renew()
                except KubeError as exc:
                    logger.warning("lease %s/%s: %s", self.terms.namespace, self.name, exc)
                    # Without a successful renewal for a whole lease duration, assume it is lost.
                    held = self.leading and self.terms.clock() - self._last_renewed < self.terms.duration_s
                if held and not self.leading:
                    self.leading = True
                    logger.info(
                        "lease %s/%s acquired by %s", self.terms.namespace, self.name, self.terms.identity
                    )
                    await on_started()
                elif not held and self.leading:
                    self.leading = False
                    logger.warning(
                        "lease %s/%s lost by %s", self.terms.namespace, self.name, self.terms.identity
                    )
                    await on_stopped()
                await self.terms.sleep(self.terms.renew_s)
        finally:
            self.leading = False

    def step_down(self) -> None:
        """Stop leading now (the log fenced this replica); the next round re-checks the lease."""
        self.leading = False

    async def release(self) -> None:
        """Give the lease up (after the owner stopped working) so another replica takes over now."""
        try:
            lease = await self.terms.client.get_json(self._path)
        except KubeError:
            return
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.terms.identity:
            return
        spec["holderIdentity"] = ""
        spec["leaseDurationSeconds"] = 1
        lease["spec"] = spec
        try:
            await self.terms.client.send_json("PUT", self._path, lease)
        except KubeError as exc:
            logger.warning("releasing lease %s/%s failed: %s", self.terms.namespace, self.name, exc)

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = micro_time(self.terms.wall_clock())
        return {
            "holderIdentity": self.terms.identity,
            "leaseDurationSeconds": self.terms.duration_seconds,
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.terms.client.get_json(self._path)
        except KubeError as exc:
            if not exc.not_found:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.terms.namespace},
                "spec": self._spec(0, None),
            }
            if self._standing is not None and not self._standing.may_take(0.0):
                return False
            return await self._write("POST", self.terms.collection, body)
        meta = lease.get("metadata") or {}
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = str(meta.get("resourceVersion") or "")
        now = self.terms.clock()
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, now)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.terms.identity:
            if self._standing is not None and not self._standing.may_keep():
                self.handing_over = True
                return False
            self.handing_over = False
            lease["spec"] = self._spec(transitions, spec.get("acquireTime"))
            return await self._write("PUT", self._path, lease)
        self.handing_over = False
        duration_s = float(spec.get("leaseDurationSeconds") or self.terms.duration_s)
        if holder and holder != self.terms.predecessor and now - self._observed[1] < duration_s:
            self._vacant_since = None
            return False
        if self._vacant_since is None:
            self._vacant_since = now
        if self._standing is not None and not self._standing.may_take(now - self._vacant_since):
            return False
        if holder and holder == self.terms.predecessor:
            logger.info(
                "lease %s/%s: taking it over from this replica's previous run %s",
                self.terms.namespace,
                self.name,
                holder,
            )
        lease["spec"] = self._spec(transitions + 1, None)
        return await self._write("PUT", self._path, lease)

    async def _write(self, method: str, path: str, body: dict[str, Any]) -> bool:
        """Create or update with optimistic concurrency: a conflict means someone else won."""
        try:
            await self.terms.client.send_json(method, path, body)
        except KubeError as exc:
            if exc.status in (409, 422):
                return False
            raise
        self._last_renewed = self.terms.clock()
        self._vacant_since = None
        return True
