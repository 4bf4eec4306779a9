"""A GitTarget's status as gitops-reverser's users read it: GR's condition types and reasons,
`Ready` never True while the last push failed or a stream is blocked, and `lastPushTime`."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from pipeline.codec.target_result import PushOutcome, TargetRefusal, TargetResult
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import Kind, ObjectRef, parse_object
from pipeline.customresources.status import RuleStreams, object_status, target_view

OBJECTS = """
apiVersion: configbutler.ai/v1alpha3
kind: GitProvider
metadata: {name: repo, namespace: reverser}
spec: {url: "https://git.example.com/state.git", allowedBranches: [main]}
---
apiVersion: configbutler.ai/v1alpha3
kind: GitTarget
metadata: {name: apps, namespace: reverser}
spec: {providerRef: {name: repo}, branch: main, path: apps}
---
apiVersion: configbutler.ai/v1alpha3
kind: WatchRule
metadata: {name: apps, namespace: reverser}
spec:
  targetRef: {name: apps}
  rules: [{resources: [configmaps]}, {apiGroups: [apps], resources: [deployments]}]
"""
TARGET = ObjectRef(Kind.GIT_TARGET, "reverser", "apps")
RULE = ObjectRef(Kind.WATCH_RULE, "reverser", "apps")
RULES = {
    RULE: [
        RuleStreams(0, ("v1/configmaps in reverser",), (), ("cm",)),
        RuleStreams(1, ("apps/v1/deployments in reverser",), (), ("deploy",)),
    ]
}
OK = TargetResult("apps", "repo", "main", "abc123", "Succeeded", 1_767_000_000_000)
FAILED = TargetResult(
    "apps", "repo", "main", "abc124", "Failed", 1_767_000_060_000, "could not read from remote"
)


def _status(states: dict[str, str], result: TargetResult | None, text: str = OBJECTS) -> dict[str, Any]:
    compiled = compile_resources(
        [parse_object(d) for d in yaml.safe_load_all(text) if d], home_namespace="reverser"
    )
    view = target_view(compiled, "apps", RULES, states)
    return object_status(compiled.reports[TARGET], None, result, target=view)


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_healthy_target_has_grs_conditions_all_true() -> None:
    status = _status({"cm": "Streaming: listed", "deploy": "Streaming: listed"}, OK)
    assert _conditions(status) == {
        "Ready": ("True", "Succeeded"),
        "Reconciling": ("False", "StreamsRunning"),
        "Stalled": ("False", "Succeeded"),
        "Validated": ("True", "Succeeded"),
        "EncryptionConfigured": ("True", "NotRequired"),
        "GitPathAccepted": ("True", "GitPathAccepted"),
        "StreamsRunning": ("True", "Succeeded"),
        "GitProviderReady": ("True", "Succeeded"),
    }
    assert status["lastPushTime"] == "2025-12-29T09:20:00Z"
    assert status["streams"] == {"summary": "2/2", "total": 2, "ready": 2}


def test_a_failing_push_keeps_ready_false_with_grs_reason_and_no_new_push_time() -> None:
    status = _status({"cm": "Streaming: listed", "deploy": "Streaming: listed"}, FAILED)
    conditions = _conditions(status)
    assert conditions["Ready"] == ("False", "GitProviderNotReady")
    assert conditions["GitProviderReady"] == ("False", "PushFailed")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "could not read from remote" in ready["message"]
    # a merge patch without it leaves the last successful push's time on the object
    assert "lastPushTime" not in status


REFUSAL = TargetRefusal(
    "UnsupportedKustomization",
    "apps/overlays/prod/kustomization.yaml",
    "Deployment prod/web",
    1_767_000_090_000,
)
STREAMING = {"cm": "Streaming: listed", "deploy": "Streaming: listed"}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_a_refused_change_stalls_the_target_naming_the_reason_and_the_file() -> None:
    status = _status(STREAMING, dataclasses.replace(OK, refusal=REFUSAL))
    conditions = _conditions(status)
    assert conditions["Stalled"] == ("True", "UnsupportedKustomization")
    assert conditions["Ready"] == ("False", "UnsupportedKustomization")
    assert conditions["GitProviderReady"] == ("True", "Succeeded"), "the last push still succeeded"
    message = _condition(status, "Stalled")["message"]
    assert "apps/overlays/prod/kustomization.yaml" in message
    assert "Deployment prod/web" in message
    assert status["lastCommit"] == {"commit": "abc123", "branch": "main"}


def test_a_refusal_before_any_push_shows_no_push() -> None:
    first = TargetResult("apps", "repo", "main", "", PushOutcome.NONE, 1_767_000_090_000, "", REFUSAL)
    status = _status(STREAMING, first)
    conditions = _conditions(status)
    assert conditions["Stalled"] == ("True", "UnsupportedKustomization")
    assert conditions["GitProviderReady"] == ("True", "Succeeded")
    assert _condition(status, "GitProviderReady")["message"] == "no push yet"
    assert not {"lastCommit", "lastPush", "lastPushTime"} & set(status)


def test_a_blocked_stream_keeps_ready_false_and_a_starting_one_is_reconciling() -> None:
    blocked = _conditions(_status({"cm": "Streaming: listed", "deploy": "Backoff: 403 Forbidden"}, OK))
    assert blocked["Ready"] == ("False", "StreamsNotRunning")
    assert blocked["StreamsRunning"] == ("False", "Blocked")
    message = next(c["message"] for c in _status({"deploy": "Backoff: 403 Forbidden"}, OK)["conditions"])
    assert "apps/v1/deployments in reverser (Backoff: 403 Forbidden)" in message
    starting = _conditions(_status({"cm": "Streaming: listed", "deploy": "Replaying: listing"}, None))
    assert starting["Ready"] == ("True", "Succeeded")
    assert starting["StreamsRunning"] == ("False", "NotReady")
    assert starting["Reconciling"] == ("True", "StreamsStarting")


def test_an_invalid_target_is_not_validated_with_grs_reason() -> None:
    status = _status({}, None, OBJECTS.replace("branch: main, path", "branch: release, path"))
    conditions = _conditions(status)
    assert conditions["Ready"] == ("False", "ValidationFailed")
    assert conditions["Stalled"] == ("True", "ValidationFailed")
    assert conditions["Validated"] == ("False", "BranchNotAllowed")
    assert conditions["GitPathAccepted"] == ("False", "NotChecked")
    assert conditions["StreamsRunning"] == ("False", "NotReady")


def test_a_rule_has_grs_streams_running_condition() -> None:
    compiled = compile_resources(
        [parse_object(d) for d in yaml.safe_load_all(OBJECTS) if d], home_namespace="reverser"
    )
    report = compiled.reports[RULE]

    def streams_running(running: frozenset[str] | None) -> tuple[str, str]:
        status = object_status(report, RULES[RULE], running=running)
        found = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
        return found["StreamsRunning"]

    assert streams_running(frozenset({"cm", "deploy"})) == ("True", "Succeeded")
    assert streams_running(frozenset({"cm"})) == ("False", "NotReady")
    assert streams_running(None) == ("False", "NotStarted")
