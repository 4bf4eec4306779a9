"""`reverser doctor` log and audit-route checks on both backends (the real Kafka broker included):
healthy topics, topics created wrong on purpose, replication below the configuration, a min ISR no
write can meet, a log held by another process, and routes with and without recent facts."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from pipeline.config import Settings
from pipeline.doctor.audit_checks import check_routes
from pipeline.doctor.log_checks import REPLICATION_SETTING, check_log
from pipeline.doctor.report import Check, Status
from pipeline.log import Log, open_log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, stream_key

REPO_ROOT = Path(__file__).resolve().parents[2]
MIN_ISR = "min.insync.replicas"
CONFIGMAPS = GroupResource("", "configmaps")


def find(checks: list[Check], subject: str, check: str) -> Check:
    (found,) = [c for c in checks if c.subject == subject and c.check == check]
    return found


async def test_healthy_topics_pass_every_log_check(any_log: Log, settings: Settings) -> None:
    await any_log.create_topics(topic_specs(settings))
    checks = await check_log(settings, any_log)
    assert {c.status for c in checks} == {Status.OK}
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    assert find(checks, names.watch_cursors, "configuration").detail.endswith("compact")


async def test_topics_made_wrong_fail_each_with_the_command_that_fixes_it(
    any_log: Log, settings: Settings
) -> None:
    specs = {spec.name: spec for spec in topic_specs(settings)}
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    await any_log.create_topics(
        [
            replace(specs[names.audit_facts], partitions=2),
            replace(specs[names.watch_cursors], cleanup_policy="delete", retention_ms=3_600_000),
        ]
    )
    checks = await check_log(settings, any_log)
    partitions = find(checks, names.audit_facts, "partitions")
    assert partitions.status is Status.FAIL
    assert partitions.detail == "expected 6, found 2"
    assert "cannot be changed in place" in partitions.fix
    cleanup = find(checks, names.watch_cursors, "cleanup.policy")
    assert cleanup.status is Status.FAIL
    assert f"--entity-name {names.watch_cursors} --add-config cleanup.policy=compact" in cleanup.fix
    missing = find(checks, names.branch_work, "topic")
    assert missing.status is Status.FAIL
    assert "reverser topics create" in missing.fix
    assert find(checks, names.watch_events, "topic").status is Status.FAIL


async def test_a_history_retention_under_a_day_is_a_risk_even_when_configured(
    any_log: Log, settings: Settings
) -> None:
    topics = settings.log.topics.model_copy(update={"watch_events_retention_ms": 3_600_000})
    short = settings.model_copy(update={"log": settings.log.model_copy(update={"topics": topics})})
    await any_log.create_topics(topic_specs(short))
    checks = await check_log(short, any_log)
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    risk = find(checks, names.watch_events, "retention.ms")
    assert risk.status is Status.FAIL
    assert risk.detail == "expected >= 86400000, found 3600000"
    assert "raise retention.ms" in risk.fix
    assert [c for c in checks if c.status is Status.FAIL] == [risk]


@pytest.mark.parametrize("backend", ["kafka"], indirect=True)
async def test_too_few_replicas_and_an_unmeetable_min_isr_fail(any_log: Log, settings: Settings) -> None:
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    specs = [spec.for_brokers(1) for spec in topic_specs(settings)]
    (work,) = [spec for spec in specs if spec.name == names.branch_work]
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.log.bootstrap_servers)
    await admin.start()
    try:
        configs = {**work.configs(), MIN_ISR: "2"}
        await admin.create_topics([NewTopic(work.name, work.partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()
    await any_log.create_topics(specs)

    checks = await check_log(settings, any_log)
    min_isr = find(checks, names.branch_work, MIN_ISR)
    assert min_isr.status is Status.FAIL
    assert min_isr.detail == "expected 1, found 2"
    assert f"--entity-name {names.branch_work} --add-config {MIN_ISR}=1" in min_isr.fix
    assert find(checks, names.watch_events, "configuration").status is Status.OK

    wanted = settings.model_copy(deep=True)
    wanted.log.topics.replication_factor = 3
    checks = await check_log(wanted, any_log)
    replication = find(checks, names.audit_facts, REPLICATION_SETTING)
    assert replication.status is Status.FAIL
    assert replication.detail == "expected 3, found 1"
    assert "kafka-reassign-partitions.sh" in replication.fix


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_doctor_cli_reports_a_log_it_cannot_open_and_exits_1(
    settings: Settings, tmp_path: Path
) -> None:
    config = tmp_path / "reverser.yaml"
    config.write_text(yaml.safe_dump(settings.model_dump(mode="json")), encoding="utf-8")
    held = open_log(settings)
    await held.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "pipeline.cli",
            "doctor",
            "--config",
            str(config),
            "--output",
            "json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 120)
    finally:
        await held.close()
    assert process.returncode == 1
    report = json.loads(out)
    assert report["ok"] is False
    (reachable,) = [c for c in report["checks"] if c["area"] == "log"]
    assert reachable["status"] == "fail"
    assert "log.bootstrap_servers" in reachable["fix"]


async def append_fact(log: Log, settings: Settings, route: str) -> None:
    topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
    await log.append(topic, b"not decoded by doctor", key=stream_key(route, CONFIGMAPS))


async def test_routes_with_and_without_recent_facts(any_log: Log, settings: Settings) -> None:
    settings = settings.model_copy(deep=True)
    settings.audit.routes = [
        type(settings.audit.routes[0])(name="prod:eu"),
        type(settings.audit.routes[0])(name="silent"),
    ]
    await any_log.create_topics(topic_specs(settings))
    await append_fact(any_log, settings, "prod:eu")
    checks = await check_routes(settings, any_log, recent_s=3600, base_url="https://reverser.example:443")
    assert find(checks, "prod:eu", "facts arriving").status is Status.OK
    silent = find(checks, "silent", "facts arriving")
    assert silent.status is Status.FAIL
    assert "https://reverser.example:443/audit-webhook/silent" in silent.fix
    assert "reverser doctor --audit-setup" in silent.fix
    webhook = find(checks, "silent", "webhook")
    assert webhook.status is Status.INFO
    assert "https://reverser.example:443/audit-webhook/silent" in webhook.detail
