"""`reverser lag` as a real process: table, JSON, exit codes, on the embedded log and on Kafka."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.log import open_log
from tests.lag.helpers import make_topic, produce, run_cli


async def _embedded_workdir(settings: Settings) -> tuple[str, str]:
    """An embedded log with one group 3 records behind, closed so the CLI can open it."""
    group = f"{settings.log.topic_prefix}-cli"
    log = open_log(settings)
    await log.start()
    try:
        tp = await make_topic(log, settings, "cli")
        await produce(log, tp, 8)
        await log.commit_group_offsets(group, {tp: 5})
    finally:
        await log.close()
    return group, tp.topic


async def test_table_on_the_embedded_log(embedded_settings: Settings) -> None:
    group, topic = await _embedded_workdir(embedded_settings)
    result = await asyncio.to_thread(run_cli, "--workdir", str(embedded_settings.workdir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["GROUP", "STATUS"]
    assert lines[1].split() == [group, "OK", "1", "3", "0", "-", "-"]
    assert [group, topic, "0", "5", "8", "3", "-", "0", "OK"] in [line.split() for line in lines]


async def test_json_on_the_embedded_log(embedded_settings: Settings) -> None:
    group, topic = await _embedded_workdir(embedded_settings)
    result = await asyncio.to_thread(
        run_cli, "--workdir", str(embedded_settings.workdir), "--output", "json", "--group=-cli$"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [g["group"] for g in document["groups"]] == [group]
    (partition,) = document["groups"][0]["partitions"]
    assert partition["topic"] == topic
    assert (partition["committed"], partition["log_end"], partition["lag"]) == (5, 8, 3)
    assert partition["lag_seconds"] is None


def test_bad_group_pattern_exits_2(tmp_path: Path) -> None:
    result = run_cli("--workdir", str(tmp_path), "--group", "(")
    assert result.returncode == 2
    assert "not a regular expression" in result.stderr


@pytest.mark.kafka
async def test_exit_code_1_when_a_group_is_err_on_kafka(
    kafka_settings: Settings, kafka_bootstrap: str
) -> None:
    """One shot on Kafka already has a window: the commits read back from __consumer_offsets."""
    group = f"{kafka_settings.log.topic_prefix}-cli-rewind"
    log = open_log(kafka_settings)
    await log.start()
    try:
        tp = await make_topic(log, kafka_settings, "cli-rewind")
        await produce(log, tp, 20)
        for offset in (5, 10, 3):
            await log.commit_group_offsets(group, {tp: offset})
            await asyncio.sleep(0.6)
    finally:
        await log.close()
    env = {
        "REVERSER_LOG__BOOTSTRAP_SERVERS": kafka_bootstrap,
        "REVERSER_LAG__POLL_INTERVAL_S": "0.5",
    }
    result = await asyncio.to_thread(run_cli, "--group", f"^{group}$", "--output", "json", env=env)
    assert result.returncode == 1, result.stderr
    (found,) = json.loads(result.stdout)["groups"]
    assert found["status"] == "ERR"
    # REWIND from the window, or STOP if the CLI took longer to start than the window spans
    assert found["partitions"][0]["status"] in ("REWIND", "STOP")
