"""Every mutation-lab scenario end to end: publish → log → follower → index → await, and via the CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pipeline.attribution import FactFollower, FactIndex, Resolver
from pipeline.attribution.cli import (
    publish_audit_documents,
    read_audit_file,
    read_watch_file,
    resolve_watch_event,
)
from pipeline.cli import main
from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from tests.attribution.corpus import SCENARIOS, all_scenarios_on_disk, materialise

GRACE_MS = 150
ROUTE = "default"
READY_GUARD_S = 60.0


def test_every_recorded_scenario_has_an_expectation() -> None:
    assert set(SCENARIOS) == all_scenarios_on_disk()


async def replay_scenario(
    log: Log, settings: Settings, directory: Path, scenario: str
) -> tuple[list[dict[str, str]], dict[str, dict[str, str]]]:
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    await log.create_topics([s for s in topic_specs(settings) if s.name == topics.audit_facts])
    expected = SCENARIOS[scenario]
    documents = [doc for name in expected.audits for doc in read_audit_file(directory / name)]
    explained = await publish_audit_documents(log, topics.audit_facts, ROUTE, documents, settings)
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(log, topics, index, settings, fetch_timeout_ms=100)
    await follower.start()
    try:
        await asyncio.wait_for(follower.wait_ready(), READY_GUARD_S)
        resolver = Resolver(index, GRACE_MS)
        lines = {}
        for name in expected.watches:
            (event,) = read_watch_file(directory / name)
            lines[name] = await resolve_watch_event(resolver, ROUTE, event)
        assert index.waiter_count() == 0
    finally:
        await follower.stop()
    return explained, lines


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_scenario_through_the_log(
    scenario: str, any_log: Log, settings: Settings, tmp_path: Path
) -> None:
    directory = materialise(scenario, tmp_path)
    explained, lines = await replay_scenario(any_log, settings, directory, scenario)
    expected = SCENARIOS[scenario]
    assert [(e["decision"], e["reason"]) for e in explained] == list(expected.audits.values())
    assert {name: (line["tier"], line["author"]) for name, line in lines.items()} == expected.watches


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scenario_through_reverser_resolve(
    scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REVERSER_LOG__BOOTSTRAP_SERVERS", raising=False)
    directory = materialise(scenario, tmp_path)
    expected = SCENARIOS[scenario]
    argv = ["resolve", "--grace-ms", str(GRACE_MS), "--explain-audit"]
    for name in expected.audits:
        argv += ["--audit", str(directory / name)]
    for name in expected.watches:
        argv += ["--watch", str(directory / name)]
    assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    audit_lines, watch_lines = lines[: len(expected.audits)], lines[len(expected.audits) :]
    assert [(a["decision"], a["reason"]) for a in audit_lines] == list(expected.audits.values())
    for line in audit_lines:
        assert set(line) == {"auditID", "verb", "decision", "reason", "stream"}
        assert line["stream"].startswith(f"{ROUTE}/")
    assert [(w["tier"], w["author"]) for w in watch_lines] == list(expected.watches.values())
    for line in watch_lines:
        assert set(line) == {
            "type",
            "group",
            "resource",
            "namespace",
            "name",
            "uid",
            "resourceVersion",
            "tier",
            "author",
            "actorKind",
        }
        assert line["actorKind"] == ("user" if line["author"] else "none")
