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
from pipeline.attribution.model import MATCHED_ON, Tier
from pipeline.cli import main
from pipeline.config import LogSettings, Settings
from pipeline.log import open_log
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from tests.attribution.corpus import SCENARIOS, all_scenarios_on_disk, materialise
from tests.conftest import unique_prefix
from tests.support.wait import wait_for

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
            "matchedOn",
        } | ({"fact"} if line["author"] else set())
        assert line["actorKind"] == ("user" if line["author"] else "none")
        assert line["matchedOn"] == MATCHED_ON[Tier(line["tier"])]


async def test_watch_event_first_fact_later_through_the_log(
    any_log: Log, settings: Settings, tmp_path: Path
) -> None:
    """The usual order in production: the resolver is already waiting when the fact lands."""
    directory = materialise("configmap/update", tmp_path)
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    await any_log.create_topics([s for s in topic_specs(settings) if s.name == topics.audit_facts])
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(any_log, topics, index, settings, fetch_timeout_ms=100)
    await follower.start()
    try:
        await asyncio.wait_for(follower.wait_ready(), READY_GUARD_S)
        (event,) = read_watch_file(directory / "watch.modified.yaml")
        waiting = asyncio.create_task(resolve_watch_event(Resolver(index, 600_000), ROUTE, event))
        await wait_for(lambda: index.waiter_count() > 0, what="the resolution to wait for its fact")
        assert not waiting.done()
        documents = read_audit_file(directory / "audit.update.yaml")
        await publish_audit_documents(any_log, topics.audit_facts, ROUTE, documents, settings)
        line = await asyncio.wait_for(waiting, READY_GUARD_S)
        assert (line["tier"], line["author"]) == ("exact", "system:admin")
        assert index.waiter_count() == 0
    finally:
        await follower.stop()


@pytest.mark.kafka
def test_reverser_resolve_on_kafka_uses_a_throwaway_prefix(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    live_prefix = unique_prefix()
    monkeypatch.setenv("REVERSER_LOG__BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("REVERSER_LOG__TOPIC_PREFIX", live_prefix)
    directory = materialise("configmap/deletecollection", tmp_path)
    argv = ["resolve", "--grace-ms", "0", "--audit", str(directory / "audit.deletecollection.yaml")]
    argv += ["--watch", str(directory / "watch.deleted.cm-a.yaml")]
    assert main(argv) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert (line["tier"], line["author"]) == ("deletecollection_body_uid", "system:admin")

    async def live_topic_exists() -> bool:
        log = open_log(Settings(log=LogSettings(backend="kafka", bootstrap_servers=kafka_bootstrap)))
        await log.start()
        try:
            return bool(await log.describe_topics([f"{live_prefix}.audit-facts"]))
        finally:
            await log.close()

    assert not asyncio.run(live_topic_exists()), "the live fact topic must never be written"
