"""The config topic record, the follower on both logs, the object store and the status of an object."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
import yaml

from pipeline.codec import DecodeError
from pipeline.codec.config_state import ConfigObject, ObjectName, decode_config_state, encode_config_state
from pipeline.codec.credentials_report import CredentialsReport, decode_credentials, encode_credentials
from pipeline.codec.watch_event import SnapshotObject
from pipeline.config import Settings
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.controller import stream_spec
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.objects import Kind, ObjectRef, parse_object
from pipeline.customresources.state import ConfigState, decode_state, encode_state
from pipeline.customresources.status import RuleStreams, _current_credentials, object_status
from pipeline.customresources.store import ObjectStore
from pipeline.log.api import Log, Record
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.watch.records import RecordBuilder
from tests.customresources.test_compile import TENANTS, UPSTREAM
from tests.support.wait import wait_for

HOME = "reverser"


def _compiled(text: str = UPSTREAM) -> Any:
    return compile_resources(
        [parse_object(d) for d in yaml.safe_load_all(text) if d], home_namespace=HOME, base=TENANTS
    )


async def _config_topic(log: Log, settings: Settings) -> str:
    """The config topic of `settings` in custom-resource mode, created on `log`."""
    settings = settings.model_copy(
        update={"custom_resources": settings.custom_resources.model_copy(update={"enabled": True})}
    )
    topic = TopicNames.for_prefix(settings.log.topic_prefix).config
    await log.create_topics([s for s in topic_specs(settings) if s.name == topic])
    return topic


async def test_states_round_trip_through_the_log_and_the_newest_wins(
    any_log: Log, settings: Settings
) -> None:
    topic = await _config_topic(any_log, settings)
    follower = ConfigFollower(any_log, topic)
    assert await follower.catch_up() is None
    first = ConfigState(1, 1000, _compiled())
    second = ConfigState(
        2, 2000, _compiled(UPSTREAM.replace("prune: {mode: always}", "prune: {mode: never}"))
    )
    await any_log.append_many(topic, [encode_state(first), encode_state(second)])
    latest = await follower.catch_up()
    assert latest is not None
    assert latest.version == 2
    assert latest.compiled.targets == second.compiled.targets
    assert latest.compiled.reports == second.compiled.reports
    assert latest.compiled.origins == second.compiled.origins
    assert latest.compiled.item_problems == second.compiled.item_problems
    assert latest.same_content(second.compiled)
    assert not latest.same_content(first.compiled)

    seen: list[int] = []

    async def on_change(state: ConfigState) -> None:
        seen.append(state.version)

    following = asyncio.create_task(follower.follow(on_change))
    try:
        await any_log.append_many(topic, [encode_state(ConfigState(3, 3000, first.compiled))])
        await wait_for(lambda: seen == [3], "the follower to hand over version 3")
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await follower.close()


def test_a_state_naming_a_kind_this_version_does_not_know_is_a_decode_error() -> None:
    pending = encode_state(ConfigState(1, 1000, _compiled()))
    record = decode_config_state(Record("c", 0, 5, 0, pending.key, pending.value, pending.headers))
    assert decode_state(Record("c", 0, 5, 0, pending.key, pending.value, pending.headers)).version == 1
    unknown = ConfigObject(ObjectName("GitRepoConfig", "", "x"), 1, (), ())
    changed = encode_config_state(replace(record, objects=(*record.objects, unknown)))
    with pytest.raises(DecodeError, match="offset 5: 'GitRepoConfig' is not a valid Kind"):
        decode_state(Record("c", 0, 5, 0, changed.key, changed.value, changed.headers))


def _object(kind: Kind, name: str, spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "generation": generation, "uid": f"uid-{name}"}
    if not kind.namespaced:
        del meta["namespace"]
    return {"apiVersion": "configbutler.ai/v1alpha3", "kind": kind.value, "metadata": meta, "spec": spec}


async def test_the_store_becomes_complete_only_when_every_kind_is_listed() -> None:
    store = ObjectStore()
    builders = {kind: RecordBuilder(stream_spec(kind, "c"), 1 << 20, lambda: 0) for kind in Kind}

    async def snapshot(kind: Kind, objects: list[dict[str, Any]]) -> None:
        items = [
            SnapshotObject(
                o["metadata"].get("namespace", ""), o["metadata"]["name"], "u", "1", json.dumps(o).encode()
            )
            for o in objects
        ]
        builder = builders[kind]
        await store.append_many(
            kind.plural,
            [builder.begin(7), *builder.chunks(7, 0, items), builder.end(7, 1, len(items), "1")],
        )

    provider = _object(Kind.GIT_PROVIDER, "repo", {"url": "https://x/y.git", "allowedBranches": ["main"]})
    await snapshot(Kind.GIT_PROVIDER, [provider])
    await snapshot(Kind.GIT_TARGET, [])
    await snapshot(Kind.WATCH_RULE, [])
    assert not store.complete
    await snapshot(Kind.CLUSTER_WATCH_RULE, [])
    assert not store.complete
    await snapshot(Kind.COMMIT_REQUEST, [])
    assert not store.complete
    await snapshot(Kind.CLUSTER_PROVIDER, [])
    assert store.complete
    assert [o.ref for o in store.objects()] == [ObjectRef(Kind.GIT_PROVIDER, "ns", "repo")]

    target = _object(Kind.GIT_TARGET, "t", {"providerRef": {"name": "repo"}, "branch": "main", "path": "p"})
    builder = builders[Kind.GIT_TARGET]
    await store.append_many(
        Kind.GIT_TARGET.plural,
        [builder.live("ADDED", target["metadata"], False, json.dumps(target).encode())],
    )
    changed = {**target, "metadata": {**target["metadata"], "generation": 2}}
    await store.append_many(
        Kind.GIT_TARGET.plural,
        [builder.live("MODIFIED", changed["metadata"], False, json.dumps(changed).encode())],
    )
    (found,) = [o for o in store.objects() if o.ref.kind is Kind.GIT_TARGET]
    assert found.generation == 2
    await store.append_many(
        Kind.GIT_TARGET.plural,
        [builder.live("DELETED", changed["metadata"], False, json.dumps(changed).encode())],
    )
    assert [o.ref.kind for o in store.objects()] == [Kind.GIT_PROVIDER]
    # cursor records of the streams are not objects
    await store.append_many("reverser.watch-cursors", [])
    assert store.revision == 9


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_object_status_reports_errors_streams_and_problems() -> None:
    compiled = _compiled(UPSTREAM.replace("branch: feature/x", "branch: release"))
    target = compiled.reports[ObjectRef(Kind.GIT_TARGET, "team-a", "apps")]
    status = object_status(target, None)
    assert _conditions(status) == {
        "Ready": ("False", "Invalid"),
        "Reconciling": ("False", "Published"),
        "Stalled": ("True", "Invalid"),
    }
    assert status["observedGeneration"] == 1
    assert "spec.branch" in status["conditions"][0]["message"]
    assert status["unsupportedFields"] == ["spec.syncPolicy.retry"]

    rule = _compiled().reports[ObjectRef(Kind.WATCH_RULE, "team-a", "apps")]
    resolved = [
        RuleStreams(0, ("v1/configmaps in team-a",), ()),
        RuleStreams(2, (), (("*", "WildcardUnsupported", "list resources by name"),)),
    ]
    status = object_status(rule, resolved)
    assert _conditions(status)["Ready"] == ("True", "PartiallyResolved")
    assert status["observedGeneration"] == 2
    assert status["streams"] == {"summary": "1 streams", "total": 1}
    assert status["rules"][1]["problems"][0]["reason"] == "WildcardUnsupported"
    nothing = object_status(rule, [RuleStreams(0, (), (("secrets", "SecretExcluded", "no plaintext"),))])
    assert _conditions(nothing)["Ready"] == ("False", "SecretExcluded")
    assert _conditions(object_status(rule, [RuleStreams(0, ("x",), ())]))["Ready"] == (
        "True",
        "StreamsResolved",
    )


def test_reconciling_is_true_while_a_rules_streams_start_and_false_once_they_run() -> None:
    rule = _compiled().reports[ObjectRef(Kind.WATCH_RULE, "team-a", "apps")]
    resolved = [
        RuleStreams(0, ("v1/configmaps in team-a",), (), ("id-cm",)),
        RuleStreams(1, ("apps/v1/deployments in team-a",), (), ("id-deploy",)),
        RuleStreams(2, (), (("*", "WildcardUnsupported", "list resources by name"),)),
    ]

    def reconciling(running: frozenset[str] | None) -> tuple[str, str, str]:
        condition = next(
            c
            for c in object_status(rule, resolved, running=running)["conditions"]
            if c["type"] == "Reconciling"
        )
        return condition["status"], condition["reason"], condition["message"]

    assert reconciling(frozenset()) == (
        "True",
        "StreamsStarting",
        "2 of 2 streams not streaming yet: v1/configmaps in team-a, apps/v1/deployments in team-a",
    )
    # a report of another version's stream (the same type, another selector) does not count
    assert reconciling(frozenset({"id-cm", "id-deploy-old-selector"}))[:2] == ("True", "StreamsStarting")
    assert "1 of 2" in reconciling(frozenset({"id-cm"}))[2]
    assert reconciling(frozenset({"id-cm", "id-deploy", "other"})) == (
        "False",
        "StreamsRunning",
        "2 streams running",
    )
    # unknown (no reports read) or no streams at all: published is all it can say
    assert reconciling(None)[:2] == ("False", "Published")
    none = [RuleStreams(0, (), (("secrets", "SecretExcluded", "no plaintext"),))]
    status = object_status(rule, none, running=frozenset())
    assert _conditions(status)["Reconciling"] == ("False", "Published")
    # an object with errors is stalled, not reconciling
    broken = _compiled(UPSTREAM.replace("branch: feature/x", "branch: release"))
    target = broken.reports[ObjectRef(Kind.GIT_TARGET, "team-a", "apps")]
    assert _conditions(object_status(target, resolved, running=frozenset()))["Reconciling"] == (
        "False",
        "Published",
    )


def _credentials(ok: bool, reason: str = "", secret: str = "team-a/git-creds") -> CredentialsReport:
    message = "" if ok else f"Secret {secret} does not exist"
    return CredentialsReport("team-a/repo", ok, reason, secret, 1000, message)


def test_a_providers_credentials_decide_its_ready_condition() -> None:
    provider = _compiled().reports[ObjectRef(Kind.GIT_PROVIDER, "team-a", "repo")]
    assert _conditions(object_status(provider, None))["Ready"] == ("True", "Accepted")
    missing = object_status(provider, None, credentials=_credentials(False, "not_found"))
    assert _conditions(missing)["Ready"] == ("False", "CredentialsUnavailable")
    assert missing["conditions"][0]["message"] == "Secret team-a/git-creds does not exist"
    assert _conditions(missing)["Stalled"] == ("False", "Accepted"), "a Secret can come without an edit"
    refused = object_status(provider, None, credentials=_credentials(False, "rejected"))
    assert _conditions(refused)["Ready"] == ("False", "CredentialsRejected")
    assert _conditions(object_status(provider, None, credentials=_credentials(True)))["Ready"] == (
        "True",
        "Accepted",
    )


async def test_the_follower_keeps_the_newest_credentials_report_per_provider(
    any_log: Log, settings: Settings
) -> None:
    topic = await _config_topic(any_log, settings)
    follower = ConfigFollower(any_log, topic)
    try:
        await any_log.append_many(
            topic,
            [encode_credentials(_credentials(False, "not_found")), encode_credentials(_credentials(True))],
        )
        await follower.catch_up()
        assert follower.credentials["team-a/repo"].ok
        assert follower.results_changed.is_set()
    finally:
        await follower.close()


def test_a_signing_key_read_from_its_secret_shows_as_signing_public_key() -> None:
    documents = [d for d in yaml.safe_load_all(UPSTREAM) if d]
    provider_doc = next(d for d in documents if d["kind"] == "GitProvider")
    provider_doc["spec"]["commit"] = {"signing": {"secretRef": {"name": "signer"}}}
    compiled = compile_resources([parse_object(d) for d in documents], home_namespace=HOME, base=TENANTS)
    ref = next(r for r in compiled.reports if r.kind is Kind.GIT_PROVIDER)
    (provider,) = compiled.providers
    report = CredentialsReport(
        provider.name, True, "", f"{ref.namespace}/signer", 1000, "", "ssh-ed25519 AAAAC3Nza-public"
    )
    # the report travels through the log unchanged, and names only the signing Secret here
    pending = encode_credentials(report)
    assert decode_credentials(Record("c", 0, 5, 0, pending.key, pending.value, pending.headers)) == report
    assert _current_credentials(compiled, provider.name, {provider.name: report}) == report
    stale = replace(report, secret=f"{ref.namespace}/old-signer")
    assert _current_credentials(compiled, provider.name, {provider.name: stale}) is None
    status = object_status(compiled.reports[ref], None, credentials=report)
    assert status["signingPublicKey"] == "ssh-ed25519 AAAAC3Nza-public"
    assert "signingPublicKey" not in object_status(compiled.reports[ref], None)
