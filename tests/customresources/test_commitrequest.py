"""CommitRequests in the controller: checked as gitops-reverser's schema checks them, turned into a
record on the target's branch, and shown in status (pure: no apiserver, no log)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.codec.branch_work import CommitRequested, work_record
from pipeline.codec.commit_request_result import RequestOutcome, RequestResult
from pipeline.config import Settings
from pipeline.customresources.commitrequest import Request, read_request, request_status, request_work
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import Kind, ObjectRef, parse_object
from pipeline.models import branch_key

HOME = "reverser"
API = "configbutler.ai/v1alpha3"
GRANT = {"namespaces": ["team-a"], "url_prefixes": ["https://git.example.com/"], "path_prefixes": ["."]}
TENANTS = Settings(custom_resources={"tenants": [GRANT]})


def _obj(
    kind: str, name: str, spec: dict[str, Any], namespace: str = "team-a", **meta: Any
) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, **meta}
    return {"apiVersion": API, "kind": kind, "metadata": metadata, "spec": spec}


def _request(spec: dict[str, Any], **meta: Any) -> Request:
    found = read_request(parse_object(_obj("CommitRequest", "save-1", spec, uid="u-1", generation=1, **meta)))
    assert isinstance(found, Request), found
    return found


def _problems(spec: dict[str, Any]) -> dict[str, str]:
    found = read_request(parse_object(_obj("CommitRequest", "save-1", spec)))
    assert isinstance(found, list), found
    return {p.path: p.message for p in found}


def _settings() -> Settings:
    objects = [
        _obj(
            "GitProvider",
            "repo",
            {"url": "https://git.example.com/a.git", "allowedBranches": ["main", "rel"]},
        ),
        _obj("GitTarget", "apps", {"providerRef": {"name": "repo"}, "branch": "rel", "path": "apps"}),
    ]
    compiled = compile_resources([parse_object(o) for o in objects], home_namespace=HOME, base=TENANTS)
    assert compiled.errors == []
    return compiled.settings(TENANTS)


def test_gitops_reversers_sample_reads_as_a_request() -> None:
    request = _request(
        {
            "gitTargetRef": {"name": "apps"},
            "message": "Increase checkout API memory after load-test failures",
            "closeDelaySeconds": 2,
        }
    )
    assert (request.git_target, request.close_delay_s) == ("apps", 2)
    assert request.message.startswith("Increase checkout")
    # older releases spell the reference targetRef
    assert _request({"targetRef": {"name": "apps"}}).git_target == "apps"
    assert _request({"gitTargetRef": {"name": "apps"}}).close_delay_s == 0


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({}, "spec.gitTargetRef.name", "is required"),
        ({"gitTargetRef": {}}, "spec.gitTargetRef.name", "is required"),
        ({"targetRef": {"name": ""}}, "spec.targetRef.name", "is required"),
        ({"gitTargetRef": {"name": "a"}, "message": ""}, "spec.message", "1-1024"),
        ({"gitTargetRef": {"name": "a"}, "message": "x" * 1025}, "spec.message", "1-1024"),
        ({"gitTargetRef": {"name": "a"}, "message": "a\tb"}, "spec.message", "control character"),
        ({"gitTargetRef": {"name": "a"}, "message": "a\r\nb"}, "spec.message", "control character"),
        ({"gitTargetRef": {"name": "a"}, "message": " \n "}, "spec.message", "non-whitespace"),
        ({"gitTargetRef": {"name": "a"}, "message": 7}, "spec.message", "string"),
        ({"gitTargetRef": {"name": "a"}, "closeDelaySeconds": 301}, "spec.closeDelaySeconds", "0-300"),
        ({"gitTargetRef": {"name": "a"}, "closeDelaySeconds": -1}, "spec.closeDelaySeconds", "0-300"),
        ({"gitTargetRef": {"name": "a"}, "closeDelaySeconds": "2"}, "spec.closeDelaySeconds", "0-300"),
        ({"gitTargetRef": {"name": "a"}, "closeDelaySeconds": True}, "spec.closeDelaySeconds", "0-300"),
    ],
)
def test_bad_fields_are_named(spec: dict[str, Any], field: str, words: str) -> None:
    problems = _problems(spec)
    assert field in problems
    assert words in problems[field]


def test_a_multi_line_message_with_newlines_is_accepted() -> None:
    assert (
        _request({"gitTargetRef": {"name": "a"}, "message": "subject\n\nbody"}).message == "subject\n\nbody"
    )


def test_the_record_goes_to_the_targets_branch_of_the_requests_namespace() -> None:
    settings = _settings()
    item = request_work(_request({"gitTargetRef": {"name": "apps"}, "message": "m"}), settings, HOME, 99)
    assert item is not None
    assert (item.provider, item.branch, item.stream.target, item.path) == (
        "team-a/repo",
        "rel",
        "team-a/apps",
        "apps",
    )
    assert item.body == CommitRequested("team-a", "save-1", "u-1", "m", 0)
    assert item.observed_at_ms == 99
    assert work_record(item).key == branch_key("team-a/repo", "rel")


def test_no_record_for_a_target_the_configuration_lacks() -> None:
    """Deny by default: only the GitTarget of the request's own namespace, and only a valid one."""
    settings = _settings()
    assert request_work(_request({"gitTargetRef": {"name": "missing"}}), settings, HOME, 0) is None
    other = read_request(
        parse_object(_obj("CommitRequest", "s", {"gitTargetRef": {"name": "apps"}}, "team-b"))
    )
    assert isinstance(other, Request)
    assert request_work(other, settings, HOME, 0) is None, "team-b cannot save team-a's target"


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def _result(outcome: RequestOutcome, sha: str = "", message: str = "") -> RequestResult:
    return RequestResult(
        "team-a", "save-1", "u-1", "team-a/apps", "team-a/repo", "rel", outcome, sha, 1, message
    )


def test_status_through_the_requests_life() -> None:
    sent = request_status(1, branch="rel")
    assert _conditions(sent)["Reconciling"] == ("True", "Requested")
    assert _conditions(sent)["AuthorAttributed"] == ("False", "AuthorCaptureDisabled")
    assert sent["branch"] == "rel"
    failed = request_status(1, result=_result(RequestOutcome.PUSH_FAILED, "abc", "remote down"))
    assert _conditions(failed)["Ready"] == ("False", "PushFailed")
    assert _conditions(failed)["Reconciling"] == ("True", "Pushing")
    assert _conditions(failed)["Pushed"][0] == "False"
    done = request_status(1, result=_result(RequestOutcome.COMMITTED, "abc"))
    assert done["sha"] == "abc"
    assert done["branch"] == "rel"
    assert _conditions(done)["Ready"] == ("True", "Committed")
    assert _conditions(done)["Pushed"] == ("True", "Pushed")
    assert _conditions(done)["Reconciling"] == ("False", "Finished")
    nothing = request_status(1, result=_result(RequestOutcome.NOTHING_TO_COMMIT, message="no window"))
    assert "sha" not in nothing
    assert _conditions(nothing)["Ready"] == ("True", "NothingToCommit")
    waiting = request_status(1, waiting_for="no valid GitTarget team-a/x")
    assert _conditions(waiting)["Reconciling"] == ("True", "WaitingForGitTarget")
    problems = read_request(parse_object(_obj("CommitRequest", "s", {})))
    assert isinstance(problems, list)
    invalid = request_status(1, problems=problems)
    assert _conditions(invalid)["Stalled"] == ("True", "Invalid")
    assert "spec.gitTargetRef.name" in invalid["conditions"][0]["message"]


def test_a_request_is_sent_once() -> None:
    request = _request({"gitTargetRef": {"name": "apps"}})
    assert not request.sent({})
    assert request.sent(request_status(1, branch="rel"))
    assert request.sent(request_status(1, result=_result(RequestOutcome.COMMITTED, "abc")))
    assert request.sent(request_status(1, result=_result(RequestOutcome.NOTHING_TO_COMMIT)))
    assert not request.sent(request_status(1, waiting_for="no target yet"))


def test_commit_requests_are_not_configuration() -> None:
    objects = [parse_object(_obj("CommitRequest", "s", {"gitTargetRef": {"name": "apps"}}))]
    compiled = compile_resources(objects, home_namespace=HOME, base=TENANTS)
    assert ObjectRef(Kind.COMMIT_REQUEST, "team-a", "s") not in compiled.reports
