"""ClusterProviders as source clusters: the connection, throttle and audit route they declare.

gitops-reverser's ClusterProvider names a source cluster; besides the authorization decided in
`clusterprovider.py`, it says how to reach the cluster and where its audit events arrive:

- `spec.kubeConfig.secretRef` (`name`, optional `key`): a remote cluster whose kubeconfig is in a
  Secret of the controller's namespace (`custom_resources.namespace`), as GR resolves it from the
  operator's namespace. It becomes the cluster's `kubeconfig_secret`, read through the API server
  by `pipeline.kube.kubeconfigsecret` when the cluster's client opens. Omitted: the cluster the
  controller runs in. `kubeConfig.configMapRef` (Flux's workload identity) is refused, as in GR.
- `spec.qps`, `spec.burst` (integers >= 1): the cluster's client throttle (`clusters[].qps`,
  `burst`). As in GR they apply to a remote cluster only; on one without `kubeConfig` they are
  listed unsupported (ignored), since the in-cluster client is the controller's own.
- `spec.attribution.auditRoute`: the route the cluster's audit facts arrive on
  (`clusters[].audit_route`); empty: the provider's name, as in GR.

How a provider meets the file's `clusters`: a provider named like a file cluster changes that
entry (its connection, when `kubeConfig` is set, replaces the file's `kubeconfig`/`in_cluster`);
a provider of another name adds a cluster: remote with `kubeConfig`, else a second name for the
cluster the controller runs in (the custom-resources cluster's connection), GR's in-cluster
provider. An added cluster takes the custom-resources cluster's lease settings, so several
replicas still elect one watcher. The result is `ClusterSettings`, decided purely here; the
compile publishes the clusters that differ from the file with the version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from pipeline.config import ClusterSettings, Settings
from pipeline.customresources.objects import CustomResource
from pipeline.customresources.problems import FieldProblem

__all__ = ["SUPPORTED_PATHS", "ClusterConnection", "effective_clusters", "merged", "read_connection"]

#: The ClusterProvider fields this module acts on (leaf paths, as `compile._SUPPORTED` lists them).
SUPPORTED_PATHS = (
    "spec.kubeConfig.secretRef.name",
    "spec.kubeConfig.secretRef.key",
    "spec.qps",
    "spec.burst",
    "spec.attribution.auditRoute",
)
#: GR's pattern and length of an audit route (a DNS subdomain).
_ROUTE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ROUTE_MAX_CHARS = 253


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    """What one ClusterProvider declares about its cluster (None: not declared)."""

    name: str
    secret_name: str | None = None
    secret_key: str | None = None
    qps: int | None = None
    burst: int | None = None
    audit_route: str | None = None

    @property
    def remote(self) -> bool:
        return self.secret_name is not None


def _positive(spec: Mapping[str, Any], field: str, problems: list[FieldProblem]) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(FieldProblem(f"spec.{field}", "must be a whole number >= 1"))
        return None
    return value


def _secret_ref(spec: Mapping[str, Any], problems: list[FieldProblem]) -> tuple[str | None, str | None]:
    config = spec.get("kubeConfig")
    if config is None:
        return None, None
    if not isinstance(config, dict):
        problems.append(FieldProblem("spec.kubeConfig", "must be a mapping with secretRef"))
        return None, None
    if config.get("configMapRef") is not None:
        problems.append(
            FieldProblem(
                "spec.kubeConfig.configMapRef",
                "workload-identity auth is not supported (as in gitops-reverser); use secretRef",
            )
        )
        return None, None
    ref = config.get("secretRef")
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str) or not name:
        problems.append(FieldProblem("spec.kubeConfig.secretRef.name", "must name the kubeconfig Secret"))
        return None, None
    key = ref.get("key") if isinstance(ref, dict) else None
    if key is not None and (not isinstance(key, str) or not key):
        problems.append(FieldProblem("spec.kubeConfig.secretRef.key", "must be a Secret key, or omitted"))
        return None, None
    return name, key


def _route(spec: Mapping[str, Any], problems: list[FieldProblem]) -> str | None:
    block = spec.get("attribution")
    route = block.get("auditRoute") if isinstance(block, dict) else None
    if route is None or route == "":
        return None
    if not isinstance(route, str) or len(route) > _ROUTE_MAX_CHARS or not _ROUTE.match(route):
        problems.append(
            FieldProblem(
                "spec.attribution.auditRoute",
                f"must be a DNS subdomain of at most {_ROUTE_MAX_CHARS} characters (lower case, digits, "
                "'-' and '.'), the last segment of /audit-webhook/<route>",
            )
        )
        return None
    return route


def read_connection(
    resource: CustomResource, problems: list[FieldProblem], ignored: list[str]
) -> ClusterConnection:
    """The connection `resource` (a ClusterProvider) declares; bad fields are `problems`, fields it
    declares but that do not apply (qps/burst without kubeConfig) are listed in `ignored`."""
    spec = resource.spec
    secret_name, secret_key = _secret_ref(spec, problems)
    qps = _positive(spec, "qps", problems)
    burst = _positive(spec, "burst", problems)
    if spec.get("kubeConfig") is None:
        ignored.extend(f"spec.{f}" for f in ("qps", "burst") if spec.get(f) is not None)
        qps = burst = None
    return ClusterConnection(resource.ref.name, secret_name, secret_key, qps, burst, _route(spec, problems))


def _with(cluster: ClusterSettings, connection: ClusterConnection, home_namespace: str) -> ClusterSettings:
    data = cluster.model_dump()
    if connection.remote:
        data.update(
            kubeconfig=None,
            in_cluster=False,
            context=None,
            kubeconfig_secret={
                "namespace": home_namespace,
                "name": connection.secret_name,
                "key": connection.secret_key,
            },
            qps=connection.qps,
            burst=connection.burst,
        )
    if connection.audit_route is not None:
        data["audit_route"] = connection.audit_route
    return ClusterSettings.model_validate(data)


def effective_clusters(
    base: Settings, connections: Iterable[ClusterConnection], home_namespace: str
) -> tuple[list[ClusterSettings], dict[str, FieldProblem]]:
    """The clusters the providers change or add (the file's others stay as they are), and each
    provider whose cluster could not be built, by name (its error at `spec`)."""
    by_name = {c.name: c for c in base.clusters}
    home = base.resources_cluster if base.clusters else None
    out: list[ClusterSettings] = []
    problems: dict[str, FieldProblem] = {}
    for connection in connections:
        current = by_name.get(connection.name)
        if connection.remote and home is not None and connection.name == home.name:
            problems[connection.name] = FieldProblem(
                "spec.kubeConfig",
                f"cluster {connection.name} is where the custom resources and the kubeconfig Secrets are "
                "read from; it cannot itself be reached through a Secret",
            )
            continue
        if current is None:
            if home is None:
                continue  # no cluster to take the controller's connection from (offline checks)
            seed = {
                "name": connection.name,
                "leader_election": home.leader_election,
                "lease_namespace": home.lease_namespace,
                "lease_duration_s": home.lease_duration_s,
                "lease_renew_s": home.lease_renew_s,
            }
            if not connection.remote:
                seed.update(kubeconfig=home.kubeconfig, context=home.context, in_cluster=home.in_cluster)
            current = ClusterSettings.model_validate(seed)
        elif not connection.remote and connection.audit_route is None:
            continue
        try:
            out.append(_with(current, connection, home_namespace))
        except ValidationError as exc:
            problems[connection.name] = FieldProblem("spec", "; ".join(e["msg"] for e in exc.errors()))
    return out, problems


def merged(base: Iterable[ClusterSettings], changed: Iterable[ClusterSettings]) -> list[ClusterSettings]:
    """The file's clusters with `changed` in place of those of the same name, then the added ones."""
    replacing = {c.name: c for c in changed}
    out = [replacing.pop(c.name, c) for c in base]
    return [*out, *replacing.values()]
