"""The submitter of a CommitRequest: the decision (pure), the index's create lookup, the audit
ingress keeping CommitRequest facts, and the controller's lookup on a real embedded log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pipeline.attribution import FactFollower, FactIndex
from pipeline.audit.scope import watched_types
from pipeline.codec import FACT_BATCH, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.config import Settings
from pipeline.customresources.commitrequest import (
    Submitter,
    decide_author,
    recorded_author,
    request_status,
)
from pipeline.customresources.controller import ConfigController
from pipeline.facts.admission import AUDIT_ID_PREFIX
from pipeline.log.api import Log, PendingRecord
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import COMMIT_REQUESTS, GroupResource, stream_key
from tests.attribution.helpers import Clock, make_index

GUARD_S = 60.0
ROUTE = "home"
TARGET = {"name": "apps", "provider": "repo", "cluster": ROUTE, "rules": [{"resources": ["configmaps"]}]}


def _settings(tmp_path: Path, mode: str = "audit") -> Settings:
    return Settings(
        workdir=tmp_path,
        clusters=[{"name": ROUTE, "attribution": mode}],
        custom_resources={"enabled": True, "namespace": "reverser"},
    )


def _create(user: str, uid: str, *, admission: bool = True, verb: str = "create") -> AuthorFact:
    audit_id = f"{AUDIT_ID_PREFIX}review-{uid}" if admission else f"audit-{uid}"
    return AuthorFact(user, verb=verb, audit_id=audit_id, namespace="team-a", name="save-1", uid=uid)


def _reason(condition: dict[str, Any]) -> tuple[str, str]:
    return condition["status"], condition["reason"]


# -- the decision (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "submitter", "expected"),
    [
        (True, Submitter("alice", True), ("True", "AttributedFromAdmission")),
        (True, Submitter("alice", False), ("True", "AttributedFromAuditEvent")),
        (True, None, ("False", "CommitterFallback")),
        (False, None, ("False", "AuthorCaptureDisabled")),
    ],
)
def test_the_condition_says_who_submitted_or_why_no_one(
    capture: bool, submitter: Submitter | None, expected: tuple[str, str]
) -> None:
    condition = decide_author(capture, submitter, 3)
    assert condition["type"] == "AuthorAttributed"
    assert _reason(condition) == expected
    assert condition["observedGeneration"] == 3
    assert ("alice" in condition["message"]) == (submitter is not None)


def test_the_decided_condition_is_carried_into_every_later_status() -> None:
    author = decide_author(True, Submitter("alice", True), 1)
    sent = request_status(1, branch="main", author=author)
    recorded = recorded_author(
        {**sent, "conditions": [{**c, "lastTransitionTime": "t"} for c in sent["conditions"]]}
    )
    assert recorded == author
    assert recorded_author({"conditions": []}) is None
    # without a decision (no capture) the status says the capture is disabled, as before
    default = {c["type"]: c for c in request_status(1, branch="main")["conditions"]}
    assert _reason(default["AuthorAttributed"]) == ("False", "AuthorCaptureDisabled")


# -- the index's create lookup ----------------------------------------------------------------


def test_the_index_names_the_creator_only_while_the_create_is_the_newest_fact() -> None:
    clock = Clock()
    index = make_index(clock)
    index.apply(ROUTE, COMMIT_REQUESTS, [_create("alice", "u-1")])
    found = index.creator(ROUTE, COMMIT_REQUESTS, "u-1")
    assert found is not None
    assert found.identity.author == "alice"
    assert index.creator("elsewhere", COMMIT_REQUESTS, "u-1") is None  # another cluster's route
    assert index.creator(ROUTE, GroupResource("", "configmaps"), "u-1") is None
    assert index.creator(ROUTE, COMMIT_REQUESTS, "u-2") is None
    assert index.creator(ROUTE, COMMIT_REQUESTS, "") is None
    # an update is not a submission: a later write hides the create
    index.apply(ROUTE, COMMIT_REQUESTS, [_create("mallory", "u-1", verb="update")])
    assert index.creator(ROUTE, COMMIT_REQUESTS, "u-1") is None


def test_the_index_forgets_a_creator_past_the_ttl() -> None:
    clock = Clock()
    index = make_index(clock, ttl_s=10)
    index.apply(ROUTE, COMMIT_REQUESTS, [_create("alice", "u-1")])
    clock.now += 11
    assert index.creator(ROUTE, COMMIT_REQUESTS, "u-1") is None


# -- the audit ingress keeps CommitRequest facts on the custom resources' route ----------------


def test_the_ingress_keeps_commit_request_facts_on_the_custom_resources_route(tmp_path: Path) -> None:
    plain = Settings(workdir=tmp_path, clusters=[{"name": ROUTE}], targets=[TARGET], providers=[_PROVIDER])
    assert not watched_types(plain)[ROUTE].covers(COMMIT_REQUESTS)
    with_resources = plain.model_copy(update={"custom_resources": _settings(tmp_path).custom_resources})
    watched = watched_types(with_resources)[ROUTE]
    assert watched.covers(COMMIT_REQUESTS)
    assert watched.covers(GroupResource("", "configmaps"))
    assert not watched.covers(GroupResource("", "secrets"))


_PROVIDER = {"name": "repo", "url": "https://git.example.com/a.git"}


# -- the controller's lookup on a real embedded log --------------------------------------------


async def _append(log: Log, settings: Settings, facts: list[AuthorFact]) -> None:
    topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
    await log.create_topics([s for s in topic_specs(settings) if s.name == topic])
    writer = codec(FACT_BATCH)
    batch = FactBatch(ROUTE, COMMIT_REQUESTS, facts)
    record = PendingRecord(
        writer.encode(batch.to_avro()), key=stream_key(ROUTE, COMMIT_REQUESTS), headers=(writer.header,)
    )
    await log.append_many(topic, [record])


async def _decide(
    tmp_path: Path, settings: Settings, facts: list[AuthorFact], uids: list[str]
) -> dict[str, Any]:
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        await _append(log, settings, facts)
        index = FactIndex.from_settings(settings.attribution)
        follower = FactFollower(log, TopicNames.for_prefix(settings.log.topic_prefix), index, settings)
        await follower.start()
        try:
            await asyncio.wait_for(follower.wait_ready(), GUARD_S)
            controller = ConfigController(settings, log, identity="test")
            controller.use_fact_index(index)
            # the facts are in the index already: a miss may end the wait at once
            controller.author_wait_s = 0.0
            return await controller.decide_authors([(uid, 1) for uid in uids])
        finally:
            await follower.stop()
    finally:
        await log.close()


async def test_the_controller_names_the_submitter_from_the_fact_on_the_log(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    facts = [_create("alice", "u-1"), _create("bob", "u-2", admission=False)]
    decided = await _decide(tmp_path, settings, facts, ["u-1", "u-2", "u-3"])
    assert _reason(decided["u-1"]) == ("True", "AttributedFromAdmission")
    assert "alice" in decided["u-1"]["message"]
    assert _reason(decided["u-2"]) == ("True", "AttributedFromAuditEvent")
    assert "bob" in decided["u-2"]["message"]
    assert _reason(decided["u-3"]) == ("False", "CommitterFallback")


async def test_a_cluster_without_facts_claims_no_actor(tmp_path: Path) -> None:
    settings = _settings(tmp_path, mode="configured-author")
    decided = await _decide(tmp_path, settings, [_create("alice", "u-1")], ["u-1"])
    assert _reason(decided["u-1"]) == ("False", "AuthorCaptureDisabled")


async def test_a_late_fact_is_found_within_the_wait(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    index = FactIndex.from_settings(settings.attribution)
    controller = ConfigController(settings, EmbeddedLog(tmp_path / "log"), identity="test")
    controller.use_fact_index(index)
    controller.author_wait_s = GUARD_S

    async def file_later() -> None:
        await asyncio.sleep(0)
        index.apply(ROUTE, COMMIT_REQUESTS, [_create("alice", "u-1")])

    filing = asyncio.create_task(file_later())
    decided = await controller.decide_authors([("u-1", 1)])
    await filing
    assert _reason(decided["u-1"]) == ("True", "AttributedFromAdmission")
