"""Doctor checks of the log: reachable, every topic present and configured as `topics check` wants,
replicated as configured, and with a min ISR that keeps acknowledged writes on more than one broker.

Topic drift comes from `pipeline.log.cli.check_topics`, the one owner of what a topic must look like.
"""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.doctor.report import Check, Status
from pipeline.log import Log, LogError, TopicDescription, open_log
from pipeline.log.cli import MISSING, Drift, check_topics
from pipeline.log.topics import topic_specs

__all__ = ["MIN_ISR_SETTING", "check_log", "replication_checks"]

AREA = "log"
MIN_ISR_SETTING = "min.insync.replicas"
# With this many replicas or more, one broker alone must not be enough to acknowledge a write.
SAFE_REPLICAS = 3


def _drift_fix(drift: Drift) -> str:
    if drift.actual == MISSING:
        return "run `reverser topics create` (or start `reverser run`, which creates missing topics)"
    if drift.setting == "partitions":
        return (
            f"partition counts cannot be changed in place without reordering keys: set "
            f"log.topics.*_partitions to {drift.actual}, or recreate {drift.topic} "
            "while the pipeline is stopped"
        )
    return (
        f"kafka-configs.sh --alter --entity-type topics --entity-name {drift.topic} "
        f"--add-config {drift.setting}={drift.expected}"
    )


def replication_checks(settings: Settings, description: TopicDescription) -> list[Check]:
    """Replication factor against `log.topics.replication_factor`, and min ISR against the replicas."""
    replicas = description.replication_factor
    if replicas is None:
        return []
    wanted = settings.log.topics.replication_factor
    checks: list[Check] = []
    name = description.name
    if replicas < wanted:
        checks.append(Check(
            area=AREA, subject=name, check="replication", status=Status.FAIL,
            detail=f"{replicas} replica(s), log.topics.replication_factor is {wanted}",
            fix=f"add replicas with kafka-reassign-partitions.sh for {name}, or lower "
                f"log.topics.replication_factor to {replicas} if that is intended",
        ))
    else:
        checks.append(Check(area=AREA, subject=name, check="replication", status=Status.OK,
                            detail=f"{replicas} replica(s)"))
    min_isr = int(description.configs.get(MIN_ISR_SETTING, "1"))
    if min_isr > replicas:
        checks.append(Check(
            area=AREA, subject=name, check="min ISR", status=Status.FAIL,
            detail=f"{MIN_ISR_SETTING}={min_isr} with only {replicas} replica(s): every write is refused",
            fix=f"kafka-configs.sh --alter --entity-type topics --entity-name {name} "
                f"--add-config {MIN_ISR_SETTING}={max(1, replicas - 1)}",
        ))
    elif replicas >= SAFE_REPLICAS and min_isr < 2:
        checks.append(Check(
            area=AREA, subject=name, check="min ISR", status=Status.WARN,
            detail=f"{MIN_ISR_SETTING}={min_isr}: one broker alone acknowledges writes",
            fix=f"kafka-configs.sh --alter --entity-type topics --entity-name {name} "
                f"--add-config {MIN_ISR_SETTING}=2",
        ))
    else:
        checks.append(Check(area=AREA, subject=name, check="min ISR", status=Status.OK,
                            detail=f"{MIN_ISR_SETTING}={min_isr}"))
    return checks


async def check_log(settings: Settings, log: Log | None = None) -> list[Check]:
    """Every log check; an unreachable log is one failed check and skips the rest."""
    owned = log is None
    log = log if log is not None else open_log(settings)
    where = settings.log.bootstrap_servers or str(settings.workdir)
    try:
        try:
            await log.start()
            specs = topic_specs(settings)
            report = await check_topics(log, specs)
            described = await log.describe_topics([spec.name for spec in specs])
        except LogError as exc:
            return [Check(
                area=AREA, subject=log.kind, check="reachable", status=Status.FAIL, detail=str(exc),
                fix=f"check log.bootstrap_servers ({where}), log.security_protocol, log.tls and log.sasl, "
                    "and that this host can reach the brokers",
            )]
    finally:
        if owned:
            await log.close()
    checks = [Check(area=AREA, subject=log.kind, check="reachable", status=Status.OK, detail=where)]
    drifted: dict[str, list[Drift]] = {}
    for drift in report.drift:
        drifted.setdefault(drift.topic, []).append(drift)
    for spec in specs:
        problems = drifted.get(spec.name, [])
        if not problems:
            checks.append(Check(area=AREA, subject=spec.name, check="configuration", status=Status.OK,
                                detail=f"{spec.partitions} partitions, {spec.cleanup_policy}"))
        for drift in problems:
            checks.append(Check(
                area=AREA, subject=spec.name, check=drift.setting, status=Status.FAIL,
                detail=f"expected {drift.expected}, found {drift.actual}", fix=_drift_fix(drift),
            ))
        description = described.get(spec.name)
        if description is not None:
            checks.extend(replication_checks(settings, description))
    return checks
