"""`reverser resolve` input handling: formats, document shapes, errors and output lines."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pipeline.attribution.kinds import group_resource_for, guess_resource
from pipeline.attribution.model import MATCHED_ON, Tier
from pipeline.cli import main
from pipeline.models import GroupResource


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_event(name: str, uid: str, rv: str, user: str = "alice", verb: str = "create") -> dict[str, Any]:
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "auditID": f"id-{name}-{verb}",
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user},
        "objectRef": {
            "apiGroup": "apps",
            "apiVersion": "v1",
            "resource": "deployments",
            "namespace": "ns",
            "name": name,
        },
        "responseObject": {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv}},
        "responseStatus": {"code": 201},
        "stageTimestamp": now(),
    }


def watch_event(event_type: str, name: str, uid: str, rv: str) -> dict[str, Any]:
    return {
        "type": event_type,
        "object": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
        },
    }


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["resolve", "--grace-ms", "0", *argv])
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def test_json_eventlist_and_yaml_multi_document_watch_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audits = tmp_path / "audit.json"
    audits.write_text(
        json.dumps(
            {
                "kind": "EventList",
                "apiVersion": "audit.k8s.io/v1",
                "items": [
                    audit_event("web", "u1", "10"),
                    audit_event("api", "u2", "11", user="system:serviceaccount:a:b"),
                    {**audit_event("web", "u1", "12"), "verb": "get"},
                ],
            }
        )
    )
    watches = tmp_path / "watch.yaml"
    watches.write_text(
        "type: ADDED\nobject: "
        + json.dumps(watch_event("ADDED", "web", "u1", "10")["object"])
        + "\n---\n"
        + json.dumps(
            [
                watch_event("ADDED", "api", "u2", "11"),
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": "Deployment",
                        "apiVersion": "apps/v1",
                        "metadata": {"resourceVersion": "99"},
                    },
                },
            ]
        )
    )
    code, lines, _ = run(
        capsys, "--audit", str(audits), "--watch", str(watches), "--explain-audit", "--route", "prod"
    )
    assert code == 0
    assert lines[:3] == [
        {
            "auditID": "id-web-create",
            "verb": "create",
            "decision": "published",
            "reason": "queued",
            "stream": "prod/apps/deployments",
        },
        {
            "auditID": "id-api-create",
            "verb": "create",
            "decision": "published",
            "reason": "queued",
            "stream": "prod/apps/deployments",
        },
        {
            "auditID": "id-web-create",
            "verb": "get",
            "decision": "dropped",
            "reason": "read_only_or_unknown_verb",
            "stream": "prod/apps/deployments",
        },
    ]
    assert lines[3] == {
        "type": "ADDED",
        "group": "apps",
        "resource": "deployments",
        "namespace": "ns",
        "name": "web",
        "uid": "u1",
        "resourceVersion": "10",
        "tier": "exact",
        "author": "alice",
        "actorKind": "user",
        "matchedOn": "an audit fact of the event's uid and resourceVersion",
        "fact": {
            "auditID": "id-web-create",
            "verb": "create",
            "namespace": "ns",
            "name": "web",
            "uid": "u1",
            "resourceVersion": "10",
            "stageMs": lines[3]["fact"]["stageMs"],
        },
    }
    assert lines[3]["fact"]["stageMs"] > 0
    assert (lines[4]["tier"], lines[4]["actorKind"]) == ("exact", "serviceaccount")
    assert (lines[5]["type"], lines[5]["tier"], lines[5]["author"], lines[5]["actorKind"]) == (
        "BOOKMARK",
        "none",
        "",
        "none",
    )


def test_audit_files_apply_in_order_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "1.yaml", tmp_path / "2.yaml"
    first.write_text(json.dumps(audit_event("web", "u1", "10", user="alice", verb="update")))
    second.write_text(json.dumps(audit_event("web", "u1", "11", user="bob", verb="update")))
    events = tmp_path / "w.yaml"
    events.write_text(
        json.dumps([watch_event("MODIFIED", "web", "u1", "11"), watch_event("DELETED", "web", "u1", "12")])
    )
    code, lines, _ = run(capsys, "--audit", str(first), "--audit", str(second), "--watch", str(events))
    assert code == 0
    assert (lines[0]["tier"], lines[0]["author"]) == ("exact", "bob")
    # the delete has no fact: the last writer (bob) is not credited with it
    assert (lines[1]["tier"], lines[1]["author"]) == ("absent", "")


@pytest.mark.parametrize(
    ("content", "document"),
    [
        ("kind: Event\n---\nfoo: [unclosed\n", 2),
        ('{"kind": "Event"', 1),
        ('---\n- 1\n---\n"just a string"\n', 2),
    ],
)
def test_unparseable_audit_file_exits_2_naming_file_and_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, document: int
) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text(content)
    code = main(["resolve", "--audit", str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert str(bad) in err
    assert f"document {document}" in err


def test_invalid_watch_document_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "watch.yaml"
    bad.write_text(json.dumps(watch_event("ADDED", "a", "u", "1")) + "\n---\n{type: ADDED}\n")
    assert main(["resolve", "--watch", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "document 2" in err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resolve", "--audit", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_negative_grace_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resolve", "--grace-ms", "-1"]) == 2
    assert "grace" in capsys.readouterr().err


def test_console_script_runs_as_a_subprocess(tmp_path: Path) -> None:
    audit = tmp_path / "a.json"
    audit.write_text(json.dumps(audit_event("web", "u1", "10")))
    watch = tmp_path / "w.json"
    watch.write_text(json.dumps(watch_event("ADDED", "web", "u1", "10")))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "resolve",
            "--audit",
            str(audit),
            "--watch",
            str(watch),
            "--grace-ms",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["tier"] == "exact"


def test_group_resource_from_api_version_and_kind() -> None:
    assert group_resource_for("v1", "ConfigMap") == (GroupResource("", "configmaps"), "v1")
    assert group_resource_for("v1", "Endpoints") == (GroupResource("", "endpoints"), "v1")
    assert group_resource_for("apps/v1", "Deployment") == (GroupResource("apps", "deployments"), "v1")
    assert group_resource_for("networking.k8s.io/v1", "Ingress") == (
        GroupResource("networking.k8s.io", "ingresses"),
        "v1",
    )
    assert group_resource_for("wardle.example.com/v1alpha1", "Flunder") == (
        GroupResource("wardle.example.com", "flunders"),
        "v1alpha1",
    )
    assert guess_resource("Policy") == "policies"
    assert guess_resource("Status") == "statuses"
    assert guess_resource("") == ""


def test_audit_log_backend_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        json.dumps(audit_event("web", "u1", "10", user="alice"))
        + "\n\n"
        + json.dumps(audit_event("web", "u1", "11", user="bob", verb="update"))
        + "\n"
    )
    watch = tmp_path / "w.json"
    watch.write_text(json.dumps(watch_event("MODIFIED", "web", "u1", "11")))
    code, lines, _ = run(capsys, "--audit", str(log), "--watch", str(watch), "--explain-audit")
    assert code == 0
    assert [line["decision"] for line in lines[:2]] == ["published", "published"]
    assert (lines[2]["tier"], lines[2]["author"]) == ("exact", "bob")


def test_bare_yaml_numbers_are_read_as_identity_strings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "a.yaml"
    audit.write_text(
        "kind: Event\nstage: ResponseComplete\nverb: create\nauditID: x\nuser: {username: carol}\n"
        "objectRef: {resource: configmaps, namespace: ns, name: cm}\n"
        "responseObject: {metadata: {name: cm, namespace: ns, uid: 42, resourceVersion: 1001}}\n"
    )
    watch = tmp_path / "w.yaml"
    watch.write_text(
        "type: ADDED\nobject: {apiVersion: v1, kind: ConfigMap, "
        "metadata: {name: cm, namespace: ns, uid: 42, resourceVersion: 1001}}\n"
    )
    code, lines, _ = run(capsys, "--audit", str(audit), "--watch", str(watch))
    assert code == 0
    assert (lines[0]["tier"], lines[0]["author"], lines[0]["resourceVersion"]) == ("exact", "carol", "1001")


def test_fact_too_large_for_the_log_is_explained_as_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("log:\n  topics:\n    max_message_bytes: 2048\n")
    audit = tmp_path / "a.json"
    audit.write_text(
        json.dumps(
            {
                "kind": "EventList",
                "items": [audit_event("x" * 1500, "u1", "10"), audit_event("ok", "u2", "11")],
            }
        )
    )
    code, lines, _ = run(capsys, "--config", str(config), "--audit", str(audit), "--explain-audit")
    assert code == 0
    assert [(line["decision"], line["reason"]) for line in lines] == [
        ("dropped", "fact_too_large"),
        ("published", "queued"),
    ]


def test_evictions_are_warned_about_and_caps_come_from_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.log"
    audit.write_text("\n".join(json.dumps(audit_event(f"o{i}", f"u{i}", str(i))) for i in range(5)))
    watch = tmp_path / "w.json"
    watch.write_text(json.dumps(watch_event("ADDED", "o0", "u0", "0")))
    small = tmp_path / "small.yaml"
    small.write_text("attribution:\n  max_facts_per_type: 4\n  max_facts: 4\n")
    code, lines, err = run(capsys, "--config", str(small), "--audit", str(audit), "--watch", str(watch))
    assert code == 0
    assert lines[0]["tier"] == "absent"
    assert "6 index entries were evicted" in err
    code, lines, err = run(capsys, "--audit", str(audit), "--watch", str(watch))
    assert lines[0]["tier"] == "exact"
    assert "evicted" not in err


def test_a_conflict_names_no_one_and_lists_both_candidates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audits = tmp_path / "a.yaml"
    audits.write_text(
        json.dumps(
            {
                "kind": "EventList",
                "items": [
                    audit_event("web", "u1", "10", user="alice", verb="update"),
                    audit_event("web", "u1", "10", user="mallory", verb="patch"),
                ],
            }
        )
    )
    watch = tmp_path / "w.yaml"
    watch.write_text(json.dumps(watch_event("MODIFIED", "web", "u1", "10")))
    code, lines, _ = run(capsys, "--audit", str(audits), "--watch", str(watch))
    assert code == 0
    assert (lines[0]["tier"], lines[0]["author"], lines[0]["actorKind"]) == ("conflict", "", "none")
    assert lines[0]["candidates"] == [
        {"author": "alice", "verb": "update", "auditID": "id-web-update"},
        {"author": "mallory", "verb": "patch", "auditID": "id-web-patch"},
    ]


def admission_review(
    uid: str, operation: str, user: str, obj: dict[str, Any], **request: Any
) -> dict[str, Any]:
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "operation": operation,
            "userInfo": {"username": user},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "namespace": "ns",
            "object": obj,
            **request,
        },
    }


def config_map(data: str, rv: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
        "data": {"k": data},
    }


def test_an_admission_match_is_explained_by_its_request_and_content_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Admission names a version by content (it never sees the resourceVersion the write gets):
    the line says so, and gives the key and the admission request to check it by."""
    reviews = tmp_path / "admission.yaml"
    reviews.write_text(
        json.dumps(
            admission_review(
                "req-1",
                "CREATE",
                "alice",
                {**config_map("a", ""), "metadata": {"name": "cm", "namespace": "ns", "uid": "u1"}},
            )
        )
        + "\n---\n"
        + json.dumps(
            [
                admission_review(
                    "req-2", "UPDATE", "bob", config_map("b", "5"), oldObject=config_map("a", "5")
                ),
                admission_review(
                    "req-3",
                    "UPDATE",
                    "carol",
                    config_map("c", "6"),
                    dryRun=True,
                    oldObject=config_map("b", "6"),
                ),
            ]
        )
    )
    watch = tmp_path / "w.yaml"
    watch.write_text(
        json.dumps(
            [
                {"type": "ADDED", "object": config_map("a", "5")},
                {"type": "MODIFIED", "object": config_map("b", "6")},
                {"type": "MODIFIED", "object": config_map("c", "7")},
            ]
        )
    )
    code, lines, _ = run(capsys, "--admission", str(reviews), "--watch", str(watch), "--explain-audit")
    assert code == 0
    assert [(line["admissionUID"], line["decision"], line["reason"]) for line in lines[:3]] == [
        ("req-1", "published", "queued"),
        ("req-2", "published", "queued"),
        ("req-3", "dropped", "dry_run"),
    ]
    assert lines[0]["stream"] == "default/configmaps"
    created, updated, dry = lines[3:]
    assert (created["tier"], created["author"], updated["tier"], updated["author"]) == (
        "admission",
        "alice",
        "admission",
        "bob",
    )
    assert created["matchedOn"] == MATCHED_ON[Tier.ADMISSION]
    assert created["fact"]["auditID"] == "admission/req-1"
    assert updated["fact"]["auditID"] == "admission/req-2"
    assert created["contentKey"]
    assert created["contentKey"] != updated["contentKey"]
    assert created["fact"]["resourceVersion"] == created["contentKey"], "the version is named by content"
    assert (dry["tier"], dry["author"]) == ("absent", ""), "a dry run is never stored, so it names no one"
    assert "fact" not in dry
    assert "contentKey" not in dry


def test_a_bad_admission_file_names_the_document_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reviews = tmp_path / "bad.yaml"
    reviews.write_text(
        "kind: AdmissionReview\napiVersion: admission.k8s.io/v1\n---\nkind: AdmissionReview\n"
        "apiVersion: admission.k8s.io/v1\nrequest: {uid: ''}\n"
    )
    assert main(["resolve", "--admission", str(reviews)]) == 2
    err = capsys.readouterr().err
    assert f"{reviews}: document 1: request must be an object" in err
    reviews.write_text("kind: AdmissionReview\napiVersion: admission.k8s.io/v1\nrequest: {uid: ''}\n")
    assert main(["resolve", "--admission", str(reviews)]) == 2
    assert "document 1: request.uid must be a non-empty string" in capsys.readouterr().err
