"""Status like a real controller: conditions, observedGeneration, streams per rule, unsupported fields.

`object_status` is pure (tested without an apiserver); `StatusWriter` patches the status
subresource, only when the status changed, keeping each condition's lastTransitionTime while its
status stays the same. Conditions follow kstatus: `Ready` (the summary), `Reconciling` and
`Stalled` (an error only a change to the object can fix).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.authormode import AttributionMode
from pipeline.codec.credentials_report import CredentialsReport
from pipeline.codec.target_result import PushOutcome, TargetResult
from pipeline.config import Settings, TargetSettings
from pipeline.customresources.compile import CompiledConfig, ObjectReport
from pipeline.customresources.conditions import TargetStream, target_conditions
from pipeline.customresources.objects import GROUP, VERSION, Kind, ObjectRef, effective_name
from pipeline.customresources.providervalidation import NOT_CHECKED, Validation
from pipeline.gitcredentials import CredentialsReason
from pipeline.kube.client import ApiResource, KubeClient, KubeError, access_allowed
from pipeline.kube.kubeconfigsecret import KubeconfigReason
from pipeline.watch.resolve import StreamSpec, resolve_target

__all__ = [
    "Observed",
    "RuleStreams",
    "StatusWriter",
    "TargetView",
    "cluster_provider_status",
    "object_status",
    "resolve_rules",
    "target_view",
]

logger = logging.getLogger(__name__)

_MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class RuleStreams:
    """What one `spec.rules[item]` resolved to: its streams, and why entries got none."""

    item: int
    streams: tuple[str, ...]
    problems: tuple[tuple[str, str, str], ...]  # (resource, reason, message)
    #: each stream's `StreamSpec.identity`, in the order of `streams` (what stream reports name)
    identities: tuple[str, ...] = ()


def _describe(spec: StreamSpec) -> str:
    gvr = (
        f"{spec.stream.group}/{spec.stream.version}/{spec.stream.resource}"
        if spec.stream.group
        else f"{spec.stream.version}/{spec.stream.resource}"
    )
    return (
        f"{gvr} in {spec.stream.scope}"
        if spec.stream.scope
        else f"{gvr} (all namespaces)"
        if spec.namespaced
        else gvr
    )


async def resolve_rules(
    compiled: CompiledConfig,
    settings: Settings,
    discover: Callable[[str], Any],
    client_for: Callable[[str], Any],
) -> dict[ObjectRef, list[RuleStreams]]:
    """Each rule object's items with their streams and problems, as the watch stage will resolve them.

    `discover(cluster)` returns the discovery map (or raises KubeError); `client_for(cluster)` the
    client whose SelfSubjectAccessReviews say whether list and watch are allowed (`Forbidden`).
    """
    clusters = {c.name: c for c in settings.clusters}
    out: dict[ObjectRef, list[RuleStreams]] = {}
    for problem in compiled.item_problems:
        entry = RuleStreams(problem.item, (), ((problem.resource, problem.reason, problem.message),))
        out.setdefault(problem.ref, []).append(entry)
    for target in compiled.targets:
        origins = compiled.origins.get(target.name, [])
        cluster = clusters.get(target.cluster)
        discovered: Mapping[tuple[str, str], ApiResource] | None = None
        failure = f"no cluster {target.cluster!r} in the configuration"
        if cluster is not None:
            try:
                discovered = await discover(cluster.name)
            except KubeError as exc:
                failure = f"discovery on cluster {cluster.name} failed: {exc}"
        for origin, rule in zip(origins, target.rules, strict=True):
            if cluster is None or discovered is None:
                entry = RuleStreams(origin.item, (), (("*", "ClusterUnavailable", failure),))
                out.setdefault(origin.ref, []).append(entry)
                continue
            only = TargetSettings.model_validate({**target.model_dump(), "rules": [rule.model_dump()]})
            specs, problems = resolve_target(only, cluster, discovered)
            streams: list[str] = []
            identities: list[str] = []
            refused = [(p.resource, p.reason, p.message) for p in problems]
            for spec in specs:
                allowed = True
                reason = ""
                for verb in ("list", "watch"):
                    try:
                        ok, why = await access_allowed(
                            client_for(cluster.name),
                            verb,
                            spec.stream.group,
                            spec.stream.resource,
                            spec.stream.scope,
                        )
                    except KubeError as exc:
                        logger.warning("access review on %s failed: %s", cluster.name, exc)
                        continue
                    if not ok:
                        allowed, reason = False, why or f"{verb} is not allowed"
                        break
                if allowed:
                    streams.append(_describe(spec))
                    identities.append(spec.identity)
                else:
                    refused.append((spec.group_resource.key, "Forbidden", f"{_describe(spec)}: {reason}"))
            entry = RuleStreams(origin.item, tuple(streams), tuple(refused), tuple(identities))
            out.setdefault(origin.ref, []).append(entry)
    for entries in out.values():
        entries.sort(key=lambda e: e.item)
    return out


@dataclass(frozen=True, slots=True)
class TargetView:
    """What a GitTarget's status needs beyond its report: whether it encrypts, and its streams
    (None: not resolved yet) with the state their cluster's leader reported."""

    encrypted: bool
    streams: tuple[TargetStream, ...] | None


def target_view(
    compiled: CompiledConfig,
    name: str,
    rules: Mapping[ObjectRef, Sequence[RuleStreams]],
    states: Mapping[str, str],
) -> TargetView:
    """The target's streams: those of the rule items whose origin is this target, by identity."""
    target = next((t for t in compiled.targets if t.name == name), None)
    if target is None:
        return TargetView(False, None)
    found: dict[str, TargetStream] = {}
    for origin in compiled.origins.get(name, []):
        for entry in rules.get(origin.ref, ()):
            if entry.item == origin.item:
                for described, identity in zip(entry.streams, entry.identities, strict=True):
                    found.setdefault(identity, TargetStream(described, states.get(identity, "")))
    return TargetView(target.encryption is not None, tuple(found.values()) if rules else None)


def _condition(kind: str, status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reconciling(
    rules: Sequence[RuleStreams] | None, running: frozenset[str] | None, generation: int
) -> dict[str, Any]:
    """True while a rule's streams are starting (not yet reported streaming by their cluster's
    leader), False once all run; objects without streams are done once published."""
    if rules is not None and running is not None:
        streams = [(d, i) for r in rules for d, i in zip(r.streams, r.identities, strict=True)]
        starting = [described for described, identity in streams if identity not in running]
        if starting:
            shown = ", ".join(starting[:3]) + (", ..." if len(starting) > 3 else "")
            text = f"{len(starting)} of {len(streams)} streams not streaming yet: {shown}"
            return _condition("Reconciling", True, "StreamsStarting", text, generation)
        if streams:
            return _condition(
                "Reconciling", False, "StreamsRunning", f"{len(streams)} streams running", generation
            )
    return _condition(
        "Reconciling", False, "Published", "the effective configuration includes it", generation
    )


def object_status(
    report: ObjectReport,
    rules: Sequence[RuleStreams] | None,
    result: TargetResult | None = None,
    running: frozenset[str] | None = None,
    credentials: CredentialsReport | None = None,
    attribution: AttributionMode | None = None,
    target: TargetView | None = None,
) -> dict[str, Any]:
    """The status of one object (without transition times): pure, for tests and the writer.

    `running` is every stream identity the watch stage reports as streaming (None: unknown, the
    `Reconciling` condition then only says the object is published). `credentials` is what the
    commit worker last said of a GitProvider's Secrets or access: unusable, refused or parked makes
    it not Ready; the public half of a signing key read from its signing Secret is `signingPublicKey`.
    `attribution` is a GitTarget's effective mode (its own, else its cluster's): `attributionMode`,
    so `kubectl get` shows whether its commits name the person or the configured identity.
    `target` (GitTargets) gives GR's conditions (`conditions.py`) and `lastPushTime`, the time of
    the last push that succeeded (left as it is on the object while pushes fail: a merge patch
    without it keeps the stored value).
    """
    generation = report.generation
    status: dict[str, Any] = {"observedGeneration": generation, "unsupportedFields": list(report.unsupported)}
    if attribution is not None:
        status["attributionMode"] = attribution.value
    if credentials is not None and credentials.signing_public_key:
        status["signingPublicKey"] = credentials.signing_public_key
    if result is not None and result.push != PushOutcome.NONE:
        status["lastCommit"] = {"commit": result.commit, "branch": result.branch}
        status["lastPush"] = {"result": result.push, "time": _time(result.at_ms), "message": result.message}
        if result.push == PushOutcome.SUCCEEDED:
            status["lastPushTime"] = _time(result.at_ms)
    if target is not None:
        if not report.errors:
            total = len(target.streams or ())
            streaming = sum(1 for s in target.streams or () if s.phase == "Streaming")
            status["streams"] = {"summary": f"{streaming}/{total}", "total": total, "ready": streaming}
        status["conditions"] = target_conditions(report, target.encrypted, target.streams, result)
        return status
    if report.errors:
        message = "; ".join(e.describe() for e in report.errors)
        ready = _condition("Ready", False, "Invalid", message, generation)
        stalled = _condition("Stalled", True, "Invalid", message, generation)
    elif rules is not None:
        streams = sum(len(r.streams) for r in rules)
        problems = [p for r in rules for p in r.problems]
        status["streams"] = {"summary": f"{streams} streams", "total": streams}
        status["rules"] = [
            {
                "item": r.item,
                "streams": list(r.streams),
                "problems": [
                    {"resource": res, "reason": why, "message": msg} for res, why, msg in r.problems
                ],
            }
            for r in rules
        ]
        if problems and not streams:
            ready = _condition("Ready", False, problems[0][1], problems[0][2], generation)
        elif problems:
            text = f"{len(problems)} entries get no stream; first: {problems[0][0]}: {problems[0][2]}"
            ready = _condition("Ready", True, "PartiallyResolved", text, generation)
        else:
            ready = _condition("Ready", True, "StreamsResolved", f"{streams} streams", generation)
        stalled = _condition("Stalled", False, "Accepted", "", generation)
    elif credentials is not None and not credentials.ok:
        why = (
            "CredentialsRejected"
            if credentials.reason == CredentialsReason.REJECTED
            else "CredentialsUnavailable"
        )
        ready = _condition("Ready", False, why, credentials.message, generation)
        stalled = _condition("Stalled", False, "Accepted", "", generation)
    else:
        ready = _condition("Ready", True, "Accepted", "", generation)
        stalled = _condition("Stalled", False, "Accepted", "", generation)
    reconciling = _reconciling(None if report.errors else rules, running, generation)
    status["conditions"] = [ready, reconciling, stalled]
    if rules is not None and not report.errors:
        status["conditions"].append(_streams_running(reconciling, generation))
    return status


def cluster_provider_status(report: ObjectReport, validation: Validation | None) -> dict[str, Any]:
    """A ClusterProvider's status: the kstatus trio and gitops-reverser's `Validated`
    (`providervalidation.py`; None: not read yet). A kubeconfig that cannot be used makes the
    provider not Ready and Stalled with the validation's reason, as in GR (only a new Secret or
    object fixes it); a Secret that could not be read leaves it not Ready without a verdict."""
    status = object_status(report, None)
    generation = report.generation
    wrong = [e for e in report.errors if e.path.startswith("spec.kubeConfig")]
    if wrong:
        validation = Validation("False", KubeconfigReason.INVALID, "; ".join(e.describe() for e in wrong))
    validation = validation or NOT_CHECKED
    ready, reconciling, stalled = status["conditions"]
    if report.accepted and validation.status != "True" and validation is not NOT_CHECKED:
        ready = _condition("Ready", False, validation.reason, validation.message, generation)
        stalled = _condition("Stalled", validation.failed, validation.reason, validation.message, generation)
    validated = {
        "type": "Validated",
        "status": validation.status,  # True, False or Unknown
        "reason": validation.reason,
        "message": validation.message,
        "observedGeneration": generation,
    }
    status["conditions"] = [ready, reconciling, stalled, validated]
    return status


def _streams_running(reconciling: dict[str, Any], generation: int) -> dict[str, Any]:
    """A rule's `StreamsRunning` (gitops-reverser's condition and printer column): True once every
    stream it resolved to streams, False while one does not yet or it resolved to none."""
    reason = reconciling["reason"]
    if reason == "StreamsRunning":
        return _condition("StreamsRunning", True, "Succeeded", reconciling["message"], generation)
    if reason == "StreamsStarting":
        return _condition("StreamsRunning", False, "NotReady", reconciling["message"], generation)
    return _condition("StreamsRunning", False, "NotStarted", "no stream is known to run yet", generation)


def _now() -> str:
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _path(ref: ObjectRef) -> str:
    where = f"namespaces/{ref.namespace}/" if ref.namespace else ""
    return f"/apis/{GROUP}/{VERSION}/{where}{ref.kind.plural}/{ref.name}/status"


@dataclass(frozen=True, slots=True)
class Observed:
    """What the running pipeline reports, for the status of the published configuration.

    `results` are each target's last commit result and `modes` each compiled target's effective
    attribution mode, by target name; `running` the streams running (None: not known yet),
    `credentials` each provider's credentials report, `states` each reported stream's state by
    identity (GitTargets' `StreamsRunning`), and `validations` each ClusterProvider's `Validated`
    by name (its kubeconfig Secret as the controller last read it).
    """

    results: Mapping[str, TargetResult] = field(default_factory=dict)
    running: frozenset[str] | None = None
    credentials: Mapping[str, CredentialsReport] = field(default_factory=dict)
    modes: Mapping[str, AttributionMode] = field(default_factory=dict)
    states: Mapping[str, str] = field(default_factory=dict)
    validations: Mapping[str, Validation] = field(default_factory=dict)


class StatusWriter:
    """Patches the status of every object whose status changed since the last write."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._written: dict[ObjectRef, dict[str, Any]] = {}

    async def write(
        self,
        compiled: CompiledConfig,
        rules: Mapping[ObjectRef, Sequence[RuleStreams]],
        home_namespace: str,
        observed: Observed,
    ) -> int:
        """Write what changed; returns how many objects were patched."""
        patched = 0
        for ref, report in sorted(compiled.reports.items()):
            wanted = _wanted(
                compiled,
                ref,
                report,
                rules,
                effective_name(ref.namespace, ref.name, home_namespace),
                observed,
            )
            previous = self._written.get(ref)
            if previous is not None and _without_times(previous) == wanted:
                continue
            before = {c["type"]: c for c in (previous or {}).get("conditions", [])}
            for condition in wanted["conditions"]:
                old = before.get(condition["type"])
                same = old is not None and old["status"] == condition["status"]
                condition["lastTransitionTime"] = (
                    old["lastTransitionTime"] if old is not None and same else _now()
                )
            try:
                await self._client.send_json(
                    "PATCH", _path(ref), {"status": wanted}, content_type=_MERGE_PATCH
                )
            except KubeError as exc:
                if not exc.not_found:
                    logger.warning("%s: writing status failed: %s", ref.describe(), exc)
                continue
            self._written[ref] = wanted
            patched += 1
        for gone in set(self._written) - set(compiled.reports):
            del self._written[gone]
        return patched


def _wanted(
    compiled: CompiledConfig,
    ref: ObjectRef,
    report: ObjectReport,
    rules: Mapping[ObjectRef, Sequence[RuleStreams]],
    name: str,
    observed: Observed,
) -> dict[str, Any]:
    """The status one object should have (`name`: its effective provider or target name)."""
    if ref.kind is Kind.CLUSTER_PROVIDER:
        return cluster_provider_status(report, observed.validations.get(ref.name))
    return object_status(
        report,
        rules.get(ref, []) if ref.kind in (Kind.WATCH_RULE, Kind.CLUSTER_WATCH_RULE) else None,
        observed.results.get(name) if ref.kind is Kind.GIT_TARGET else None,
        observed.running,
        _current_credentials(compiled, name, observed.credentials) if ref.kind is Kind.GIT_PROVIDER else None,
        observed.modes.get(name) if ref.kind is Kind.GIT_TARGET else None,
        target_view(compiled, name, rules, observed.states) if ref.kind is Kind.GIT_TARGET else None,
    )


def _current_credentials(
    compiled: CompiledConfig, provider: str, reports: Mapping[str, CredentialsReport]
) -> CredentialsReport | None:
    """The provider's credentials report, unless it is about a Secret the provider no longer names
    (a report naming no Secret is about the provider's access itself: parked, or working)."""
    report = reports.get(provider)
    found = next((p for p in compiled.providers if p.name == provider), None)
    if report is None or found is None:
        return None
    named = [ref.describe() for ref in (found.credentials_secret, found.signing_secret) if ref is not None]
    return report if report.secret in named or not report.secret else None


def _without_times(status: dict[str, Any]) -> dict[str, Any]:
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
        ],
    }
