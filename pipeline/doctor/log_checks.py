"""Doctor checks of the log: reachable, and every topic present with the partitions, replication
factor, min ISR, cleanup policy, retention and limits the pipeline needs.

What a topic must look like is owned by `reverser topics check` (`pipeline.log.cli.check_topics`);
this module only turns each drift into a check that says which command fixes it.
"""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.doctor.report import Check, Status
from pipeline.log import Log, LogError, open_log
from pipeline.log.cli import MISSING, Drift, check_topics
from pipeline.log.topics import MIN_HISTORY_RETENTION_MS, TopicNames, topic_specs

__all__ = ["REPLICATION_SETTING", "check_log"]

AREA = "log"
REPLICATION_SETTING = "replication.factor"


def _drift_fix(drift: Drift) -> str:
    if drift.actual == MISSING:
        return "run `reverser topics create` (or start `reverser run`, which creates missing topics)"
    if drift.setting == REPLICATION_SETTING:
        return (
            f"change the replicas of {drift.topic} with kafka-reassign-partitions.sh, or set "
            f"log.topics.replication_factor to {drift.actual} if that is intended"
        )
    if drift.kind == "risk":
        if drift.setting == "retention.ms":
            return (
                f"raise retention.ms of {drift.topic} to at least {MIN_HISTORY_RETENTION_MS} "
                "(log.topics.*_retention_ms, then kafka-configs.sh --alter), or -1 to keep it forever"
            )
        return (
            f"kafka-configs.sh --alter --entity-type topics --entity-name {drift.topic} "
            f"--add-config {drift.setting}={drift.expected}"
        )
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


async def check_log(settings: Settings, log: Log | None = None) -> list[Check]:
    """Every log check; an unreachable log is one failed check and skips the rest."""
    owned = log is None
    log = log if log is not None else open_log(settings)
    where = settings.log.bootstrap_servers or str(settings.workdir)
    try:
        try:
            await log.start()
            specs = topic_specs(settings)
            report = await check_topics(log, specs, TopicNames.for_prefix(settings.log.topic_prefix))
        except LogError as exc:
            return [
                Check(
                    area=AREA,
                    subject=log.kind,
                    check="reachable",
                    status=Status.FAIL,
                    detail=str(exc),
                    fix=f"check log.bootstrap_servers ({where}), log.security_protocol, log.tls and "
                    "log.sasl, and that this host can reach the brokers",
                )
            ]
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
            checks.append(
                Check(
                    area=AREA,
                    subject=spec.name,
                    check="configuration",
                    status=Status.OK,
                    detail=f"{spec.partitions} partitions, {spec.cleanup_policy}",
                )
            )
        for drift in problems:
            checks.append(
                Check(
                    area=AREA,
                    subject=spec.name,
                    check=drift.setting,
                    status=Status.FAIL,
                    detail=f"expected {drift.expected}, found {drift.actual}",
                    fix=_drift_fix(drift),
                )
            )
    return checks
