"""A `clusters` entry: how a source cluster is reached, watched and its watcher elected."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Final

from pydantic import Field, model_validator

from pipeline.authormode import AttributionMode
from pipeline.config.references import KubeconfigSecretReference
from pipeline.config.section import DNS_LABEL, Section
from pipeline.slices import DEFAULT_SLICE_MS

#: The most shards a cluster's watch may be split into (one Lease and one producer each).
MAX_WATCH_SHARDS: Final = 64


class ClusterSettings(Section):
    """A source cluster; its name is the audit route its facts arrive on."""

    name: str
    """The source cluster's name; its audit facts arrive on the route of the same name unless audit_route
    says otherwise."""
    kubeconfig: Path | None = None
    """Kubeconfig file to reach the cluster's API server."""
    context: str | None = None
    """Context of the kubeconfig to use; none: its current context."""
    in_cluster: bool = False
    """Use the pod's service account (when running inside the cluster)."""
    kubeconfig_secret: KubeconfigSecretReference | None = None
    """A Secret holding the kubeconfig, instead of `kubeconfig` or `in_cluster` (a remote cluster)."""
    qps: float | None = Field(default=None, gt=0)
    """Requests per second this process sends the cluster's API server (LIST, WATCH, discovery),
    averaged; none: unthrottled."""
    burst: int | None = Field(default=None, ge=1)
    """Requests that may go at once above `qps`; none: `qps` rounded up (needs `qps`)."""
    audit_route: str | None = None
    """The audit route this cluster's facts arrive on; none: the cluster's name."""
    attribution: AttributionMode | None = None
    """Who authors its targets' commits: `audit` (the audit facts name the author) or `configured-author`
    (the provider's committer, no wait: a cluster without audit delivery, such as EKS, GKE or AKS);
    none: its audit route's (`audit.routes[].attribution`), else `audit`."""
    watch_backoff_initial_s: float = Field(default=1.0, gt=0)
    """First pause before a failed watch is retried, in seconds (doubles up to the max)."""
    watch_backoff_max_s: float = Field(default=60.0, gt=0)
    """Longest pause between watch retries, in seconds."""
    watch_timeout_s: int = Field(default=300, gt=0)
    """Server-side timeout of one watch request, in seconds."""
    watch_rediscover_s: float = Field(default=300.0, gt=0)
    """How often API discovery is repeated to pick up new resource types, in seconds."""
    watch_list_page_size: int = Field(default=500, gt=0, le=10_000)
    """Objects per LIST page when a snapshot falls back to LIST (a server without WatchList); one
    page at a time is held in memory, so this bounds a snapshot's memory, in objects."""
    watch_slice_ms: float = Field(default=DEFAULT_SLICE_MS, gt=0, le=1000)
    """Longest run of snapshot or event processing before a stream gives the event loop back (so
    `/healthz` answers during a large sync), in milliseconds."""
    leader_election: bool = False
    """Watch this cluster only while holding its Lease (needed with more than one replica)."""
    lease_namespace: str | None = Field(default=None, pattern=DNS_LABEL)
    """Namespace of the Lease; none: the namespace the process runs in."""
    lease_name: str | None = None
    """Name of the Lease; none: reverser-watch-<cluster name>."""
    lease_duration_s: float = Field(default=15.0, gt=0)
    """How long a Lease holder keeps leadership without renewing, in seconds."""
    lease_renew_s: float = Field(default=2.0, gt=0)
    """How often the holder renews its Lease, in seconds."""
    watch_shards: int = Field(default=1, ge=1, le=MAX_WATCH_SHARDS)
    """Shards the cluster's watch streams are split into by group/resource, each with its own Lease
    (`<lease name>-shard-<n>`) and fencing, dealt out evenly over the live replicas; more than one
    needs leader_election. 1: one replica watches the whole cluster."""
    watch_claim_interval_s: float = Field(default=5.0, gt=0)
    """How often a watcher writes its claim on watch-claims (detects a second watcher), in seconds."""

    @property
    def route(self) -> str:
        return self.audit_route or self.name

    @property
    def effective_lease_name(self) -> str:
        """The Lease that elects the one replica watching this cluster."""
        return self.lease_name or f"reverser-watch-{self.name}"

    @property
    def effective_burst(self) -> int | None:
        """The throttle's burst, in requests; None: no throttle."""
        if self.qps is None:
            return None
        return self.burst if self.burst is not None else max(1, math.ceil(self.qps))

    @model_validator(mode="after")
    def _connection(self) -> ClusterSettings:
        if self.kubeconfig_secret is not None:
            other = next(
                (f for f, set_ in (("kubeconfig", self.kubeconfig), ("in_cluster", self.in_cluster)) if set_),
                None,
            )
            if other is not None:
                raise ValueError(
                    f"kubeconfig_secret and {other} are exclusive: choose one way to reach the cluster"
                )
            if self.context is not None:
                raise ValueError(
                    "context applies to a kubeconfig file; kubeconfig_secret uses its current context"
                )
        if self.burst is not None and self.qps is None:
            raise ValueError("burst needs qps (the rate the burst is taken above)")
        return self

    @model_validator(mode="after")
    def _timing_ranges(self) -> ClusterSettings:
        if self.watch_backoff_max_s < self.watch_backoff_initial_s:
            raise ValueError("watch_backoff_max_s must be >= watch_backoff_initial_s")
        if self.lease_renew_s >= self.lease_duration_s:
            raise ValueError("lease_renew_s must be shorter than lease_duration_s")
        if self.watch_shards > 1 and not self.leader_election:
            raise ValueError(
                "watch_shards > 1 needs leader_election: true (without it every replica watches "
                "every shard, and each change is written once per replica)"
            )
        return self


#: A cluster with nothing set but its name: the watch tuning a caller without a cluster (a test, a
#: watcher of no cluster) falls back to, so those defaults too are written only above.
CLUSTER_DEFAULTS: Final = ClusterSettings(name="defaults")
