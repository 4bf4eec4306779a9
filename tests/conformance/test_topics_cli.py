"""`reverser topics create|check` on both backends, with drift made on purpose."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.config import Settings
from pipeline.exitcodes import ExitCode
from pipeline.log import default_replication, open_log
from pipeline.log.topics import TopicNames, topic_specs

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_config(settings: Settings, tmp_path: Path) -> Path:
    path = tmp_path / "reverser.yaml"
    path.write_text(yaml.safe_dump(settings.model_dump(mode="json")), encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def make_drift(settings: Settings) -> None:
    """Create two topics wrongly: audit facts with too few partitions, cursors not compacted."""
    specs = {spec.name: spec for spec in topic_specs(settings)}
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    wrong = [
        replace(specs[names.audit_facts], partitions=2),
        replace(specs[names.watch_cursors], cleanup_policy="delete", retention_ms=3_600_000),
    ]

    async def create() -> None:
        log = open_log(settings)
        await log.start()
        try:
            await log.create_topics(wrong)
        finally:
            await log.close()

    asyncio.run(create())


def test_check_reports_drift_and_create_fills_in_missing_topics(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(settings, tmp_path))
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    make_drift(settings)

    code, out = run_cli(capsys, "topics", "check", "--config", config, "--output", "json")
    assert code == ExitCode.FINDINGS
    report = json.loads(out)
    assert report["ok"] is False
    drift = {(d["topic"], d["setting"]): (d["expected"], d["actual"]) for d in report["drift"]}
    assert drift[(names.audit_facts, "partitions")] == ("6", "2")
    assert drift[(names.watch_cursors, "cleanup.policy")] == ("compact", "delete")
    for missing in (names.watch_events, names.branch_work, names.dead_letter):
        assert drift[(missing, "topic")] == ("present", "(missing)")
    assert (names.audit_facts, "retention.ms") not in drift

    code, out = run_cli(capsys, "topics", "create", "--config", config)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "ACTION", "PARTITIONS", "REPLICAS", "CONFIGS"]
    actions = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert actions == {
        names.audit_facts: "exists",
        names.watch_events: "created",
        names.watch_cursors: "exists",
        names.watch_claims: "created",
        names.branch_work: "created",
        names.dead_letter: "created",
        names.object_state: "created",
    }

    code, out = run_cli(capsys, "topics", "check", "--config", config)
    assert code == ExitCode.FINDINGS
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["TOPIC", "SETTING", "EXPECTED", "ACTUAL", "KIND"]
    assert [names.audit_facts, "partitions", "6", "2", "drift"] in rows
    assert [names.watch_cursors, "cleanup.policy", "compact", "delete", "drift"] in rows
    assert not any(row[1] == "topic" for row in rows[1:])


def test_create_then_check_is_clean(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(settings, tmp_path))
    code, out = run_cli(capsys, "topics", "create", "--config", config, "--output", "json")
    assert code == 0
    created = json.loads(out)
    assert created["backend"] == settings.log.effective_backend
    assert {t["action"] for t in created["topics"]} == {"created"}

    code, out = run_cli(capsys, "topics", "create", "--config", config, "--output", "json")
    assert code == 0
    assert {t["action"] for t in json.loads(out)["topics"]} == {"exists"}

    code, out = run_cli(capsys, "topics", "check", "--config", config)
    assert code == 0
    assert out.startswith("ok: 7 topics match")


def test_check_flags_configurations_that_can_lose_state(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """History shorter than the documented bound is a risk even when configured so; an object-state
    topic that is not compacted is reported once (as drift), not twice."""
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    short = settings.model_copy(
        update={
            "log": settings.log.model_copy(
                update={"topics": settings.log.topics.model_copy(update={"branch_work_retention_ms": 60_000})}
            )
        }
    )
    config = str(write_config(short, tmp_path))
    specs = {spec.name: spec for spec in topic_specs(short)}

    async def create() -> None:
        log = open_log(short)
        await log.start()
        try:
            await log.create_topics([replace(specs[names.object_state], cleanup_policy="delete")])
        finally:
            await log.close()

    asyncio.run(create())
    code, out = run_cli(capsys, "topics", "create", "--config", config)
    assert code == 0
    code, out = run_cli(capsys, "topics", "check", "--config", config, "--output", "json")
    assert code == ExitCode.FINDINGS
    found = [(d["topic"], d["setting"], d["kind"]) for d in json.loads(out)["drift"]]
    assert sorted(found) == sorted(
        [
            (names.branch_work, "retention.ms", "risk"),
            (names.object_state, "cleanup.policy", "drift"),
        ]
    )


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_check_exits_with_a_clear_error_when_the_log_is_in_use(
    settings: Settings, tmp_path: Path
) -> None:
    config = write_config(settings, tmp_path)
    log = open_log(settings)
    await log.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "pipeline.cli",
            "topics",
            "check",
            "--config",
            str(config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        _, stderr = await asyncio.wait_for(process.communicate(), 120)
    finally:
        await log.close()
    assert process.returncode == ExitCode.LOG_UNAVAILABLE
    assert "reverser topics check: log unavailable: embedded log at" in stderr.decode()
    assert "supports one replica" in stderr.decode()


def test_invalid_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("log:\n  topics:\n    audit_facts_partitions: 0\n", encoding="utf-8")
    assert main(["topics", "check", "--config", str(config)]) == 2
    assert "log.topics.audit_facts_partitions" in capsys.readouterr().err


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))])
def test_default_replication_follows_the_cluster_size(brokers: int, expected: tuple[int, int]) -> None:
    assert default_replication(brokers) == expected
    spec = topic_specs(Settings())[0].for_brokers(brokers)
    assert (spec.replication_factor, spec.min_insync_replicas) == expected
    assert spec.configs()["min.insync.replicas"] == str(expected[1])


def test_explicit_replication_wins_and_min_insync_may_not_exceed_it() -> None:
    settings = Settings(log={"topics": {"replication_factor": 2}})
    spec = topic_specs(settings)[0].for_brokers(3)
    assert (spec.replication_factor, spec.min_insync_replicas) == (2, 1)
    with pytest.raises(ValueError, match="min_insync_replicas"):
        Settings(log={"topics": {"replication_factor": 1, "min_insync_replicas": 2}})
