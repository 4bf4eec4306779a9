"""Doctor checks of each source cluster: the apiserver answers, and the identity the service runs as
may list and watch every stream the rules resolve to and may hold the watch Lease.

Permissions are asked of the apiserver itself (SelfSubjectAccessReview), so RBAC, webhooks and
aggregated authorizers all count exactly as they will for the service; the streams come from
`pipeline.watch.cli.resolve_all`, the same resolution `reverser run` and `reverser watch-rules` use.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.config import ClusterSettings, Settings
from pipeline.doctor.report import Check, Status
from pipeline.kube.client import KubeClient, KubeError, access_allowed, open_client
from pipeline.kube.kubeconfigsecret import with_kubeconfig_secrets
from pipeline.kube.lease import lease_namespace
from pipeline.watch.cli import resolve_all
from pipeline.watch.manager import ClientFactory
from pipeline.watch.resolve import RuleProblem, StreamSpec

__all__ = ["LEASE_VERBS", "ROSTER_VERBS", "STREAM_VERBS", "access_allowed", "check_clusters"]

AREA = "cluster"
STREAM_VERBS = ("list", "watch")
LEASE_VERBS = ("get", "create", "update")
#: What a sharded cluster's roster needs on top (its member Leases, named after replica identities).
ROSTER_VERBS = ("list", "delete")


def _rule(group: str, resource: str, verbs: Iterable[str], namespace: str) -> str:
    where = f"a Role in namespace {namespace}" if namespace else "a ClusterRole (bound cluster-wide)"
    return (
        f"grant the service account {', '.join(verbs)} on {resource}"
        f"{'.' + group if group else ''} with {where}; the chart grants it to the resources "
        "that config.targets[].rules name"
    )


async def _stream_checks(client: KubeClient, cluster: str, specs: list[StreamSpec]) -> list[Check]:
    checks: list[Check] = []
    seen: set[tuple[str, str, str]] = set()
    for spec in specs:
        stream = spec.stream
        key = (stream.group, stream.resource, stream.scope)
        if key in seen:
            continue
        seen.add(key)
        denied = []
        for verb in STREAM_VERBS:
            allowed, reason = await access_allowed(client, verb, stream.group, stream.resource, stream.scope)
            if not allowed:
                denied.append(verb + (f" ({reason})" if reason else ""))
        subject = f"{stream.group_resource.key}@{stream.scope or '(cluster)'}"
        if denied:
            checks.append(
                Check(
                    area=AREA,
                    subject=cluster,
                    check=f"may watch {subject}",
                    status=Status.FAIL,
                    detail="denied: " + ", ".join(denied),
                    fix=_rule(stream.group, stream.resource, STREAM_VERBS, stream.scope),
                )
            )
        else:
            checks.append(
                Check(
                    area=AREA,
                    subject=cluster,
                    check=f"may watch {subject}",
                    status=Status.OK,
                    detail="list, watch allowed",
                )
            )
    return checks


async def _lease_check(client: KubeClient, cluster: ClusterSettings) -> Check:
    namespace = lease_namespace(cluster.lease_namespace)
    verbs = LEASE_VERBS + (ROSTER_VERBS if cluster.watch_shards > 1 else ())
    denied = [
        verb
        for verb in verbs
        if not (await access_allowed(client, verb, "coordination.k8s.io", "leases", namespace))[0]
    ]
    subject = f"lease {namespace}/{cluster.effective_lease_name}"
    if denied:
        return Check(
            area=AREA,
            subject=cluster.name,
            check=f"may hold {subject}",
            status=Status.FAIL,
            detail="denied: " + ", ".join(denied),
            fix=f"grant {', '.join(verbs)} on leases.coordination.k8s.io with a Role in namespace "
            f"{namespace} (the chart's rbac.create does), or set clusters[].lease_namespace",
        )
    return Check(
        area=AREA,
        subject=cluster.name,
        check=f"may hold {subject}",
        status=Status.OK,
        detail=f"{', '.join(verbs)} allowed",
    )


def _problem_check(problem: RuleProblem, cluster: str) -> Check:
    return Check(
        area=AREA,
        subject=cluster,
        check=f"rule {problem.target}#{problem.rule} {problem.resource}",
        status=Status.WARN,
        detail=f"{problem.reason}: {problem.message}",
        fix="`reverser watch-rules` lists every rule entry that resolves to no stream and why",
    )


async def _one_cluster(
    cluster: ClusterSettings, specs: list[StreamSpec], problems: list[RuleProblem], factory: ClientFactory
) -> list[Check]:
    try:
        client = await factory(cluster)
    except Exception as exc:  # a kubeconfig that cannot be loaded: any error the loader raises
        return [
            Check(
                area=AREA,
                subject=cluster.name,
                check="credentials",
                status=Status.FAIL,
                detail=str(exc),
                fix="check clusters[].kubeconfig / context (or in_cluster: true inside a pod)"
                if cluster.kubeconfig_secret is None
                else f"create or fix {cluster.kubeconfig_secret.describe()} (docs/custom-resources.md, "
                "ClusterProvider)",
            )
        ]
    try:
        try:
            version = await client.get_json("/version")
        except KubeError as exc:
            return [
                Check(
                    area=AREA,
                    subject=cluster.name,
                    check="apiserver reachable",
                    status=Status.FAIL,
                    detail=str(exc),
                    fix="check the server address and CA in the kubeconfig and the network path",
                )
            ]
        checks = [
            Check(
                area=AREA,
                subject=cluster.name,
                check="apiserver reachable",
                status=Status.OK,
                detail=str(version.get("gitVersion", "")),
            )
        ]
        try:
            checks += await _stream_checks(client, cluster.name, specs)
            if cluster.leader_election:
                checks.append(await _lease_check(client, cluster))
        except KubeError as exc:
            checks.append(
                Check(
                    area=AREA,
                    subject=cluster.name,
                    check="access review",
                    status=Status.FAIL,
                    detail=str(exc),
                    fix="the identity must be allowed to create selfsubjectaccessreviews "
                    "(every authenticated user is, through the system:basic-user ClusterRole)",
                )
            )
        checks += [_problem_check(p, cluster.name) for p in problems]
        return checks
    finally:
        await client.close()


async def check_clusters(settings: Settings) -> list[Check]:
    """Checks of every configured cluster that a target watches."""
    try:
        specs, problems = await resolve_all(settings)
    except Exception:  # an unloadable kubeconfig: `_one_cluster` reports it per cluster with its reason
        specs, problems = [], []
    target_cluster = {t.name: t.cluster for t in settings.targets}
    factory = with_kubeconfig_secrets(open_client, settings.resources_cluster if settings.clusters else None)
    checks: list[Check] = []
    for cluster in settings.clusters:
        mine = [s for s in specs if s.stream.cluster == cluster.name]
        theirs = [p for p in problems if target_cluster.get(p.target) == cluster.name]
        if not mine and not theirs and not any(t.cluster == cluster.name for t in settings.targets):
            checks.append(
                Check(
                    area=AREA,
                    subject=cluster.name,
                    check="targets",
                    status=Status.INFO,
                    detail="no target watches this cluster",
                )
            )
            continue
        checks += await _one_cluster(cluster, mine, theirs, factory)
    return checks
