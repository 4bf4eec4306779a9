"""Doctor rows of the attribution mode: who authors each cluster's and each target's commits.

Pure (no I/O): the answer is in the configuration. The warning is for the case the mode exists for:
a target attributed from audit facts whose route no audit ingress serves (a managed cluster, EKS,
GKE or AKS, cannot post audit events to a webhook), so each of its changes would be held for
`attribution.max_wait_ms` and then committed as `unknown (attribution unresolved)`.
"""

from __future__ import annotations

from pipeline.authormode import AttributionMode
from pipeline.config import ClusterSettings, Settings, TargetSettings
from pipeline.doctor.report import Check, Status

__all__ = ["check_attribution"]

AREA = "attribution"


def _route_of(settings: Settings, target: TargetSettings) -> str:
    cluster = next((c for c in settings.clusters if c.name == target.cluster), None)
    return target.cluster if cluster is None else cluster.route


def _describe(mode: AttributionMode, settings: Settings, target: TargetSettings) -> str:
    if mode is AttributionMode.CONFIGURED_AUTHOR:
        committer = settings.provider(target.provider).committer
        return f"configured-author: every commit is authored by {committer.name} <{committer.email}>, at once"
    return f"audit: the facts of audit route {_route_of(settings, target)} name each author"


def _origin(settings: Settings, cluster: ClusterSettings) -> str:
    """Where a cluster's mode comes from: itself, its audit route, or the default."""
    if cluster.attribution is not None:
        return "set on the cluster"
    route = next((r for r in settings.audit.routes if r.name == cluster.route), None)
    if route is not None and route.attribution is not None:
        return f"its audit route {route.name}'s"
    return "the default"


def check_attribution(settings: Settings) -> list[Check]:
    """One row per cluster (its default mode) and per target (its effective mode, and whether its
    audit route is served when it is attributed from audit)."""
    checks = [
        Check(
            area=AREA,
            subject=cluster.name,
            check="default mode",
            status=Status.INFO,
            detail=f"{settings.cluster_attribution_mode(cluster)} ({_origin(settings, cluster)}; "
            "targets of this cluster that set no mode)",
        )
        for cluster in settings.clusters
    ]
    served = {route.name for route in settings.audit.routes} if settings.audit.enabled else set()
    for target in settings.targets:
        mode = settings.attribution_mode(target)
        origin = "set on the target" if target.attribution is not None else "its cluster's"
        route = _route_of(settings, target)
        if mode is AttributionMode.AUDIT and route not in served:
            checks.append(
                Check(
                    area=AREA,
                    subject=target.name,
                    check="mode",
                    status=Status.WARN,
                    detail=f"audit ({origin}), but no audit route {route} is served here: every change is "
                    f"held {settings.attribution.max_wait_ms} ms, then committed as unresolved",
                    fix=f"declare audit route {route} (audit.routes) and point the apiserver at it, or set "
                    f"attribution: configured-author on cluster {target.cluster} or on the target when "
                    "the cluster cannot deliver audit events (EKS, GKE, AKS)",
                )
            )
            continue
        checks.append(
            Check(
                area=AREA,
                subject=target.name,
                check="mode",
                status=Status.INFO,
                detail=f"{_describe(mode, settings, target)} ({origin})",
            )
        )
    return checks
