"""Recorded watch events from the corpus, sanitised as the watch stage does, through the branch worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.codec.branch_work import WorkAuthor, WorkItem, Write
from pipeline.content.sanitize import is_terminating, sanitize, sanitized_json
from tests.commit.helpers import ALICE, BOB, Work, files, git, log_lines
from tests.commit.test_branch_worker import Harness
from tests.support.corpus import MUTATIONLAB

NAMESPACE = "team-a"


def recorded(scenario: str, name: str) -> dict[str, Any]:
    """A watch event with its tokens given concrete values (namespace, uids, resourceVersions)."""
    text = (MUTATIONLAB / scenario / name).read_text()
    text = text.replace("<ns-1>", NAMESPACE).replace("<ts>", "2026-06-25T10:00:00.000000Z")
    event: dict[str, Any] = yaml.safe_load(text)
    return event


def to_work(w: Work, event: dict[str, Any], author: WorkAuthor, resource: str = "configmaps") -> WorkItem:
    obj = event["object"]
    deleting = event["type"] == "DELETED" or is_terminating(obj)
    operation = "DELETE" if deleting else ("CREATE" if event["type"] == "ADDED" else "UPDATE")
    meta = obj["metadata"]
    item = w._item(
        Write(
            operation=operation,
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            uid=str(meta.get("uid")),
            resource_version=str(meta.get("resourceVersion")),
            object_json=None if deleting else sanitized_json(sanitize(obj)),
            author=author,
        ),
        resource=resource,
    )
    return item


async def test_create_then_update_is_a_one_line_diff(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Work()
    await h.feed(to_work(w, recorded("configmap/create-succeeds", "watch.added.yaml"), ALICE))
    await h.settle_time(5)
    created = files(h.remote)
    [content] = created.values()
    assert "managedFields" not in content
    assert "resourceVersion" not in content
    update = recorded("configmap/update", "watch.modified.yaml")
    created_meta = yaml.safe_load(content)["metadata"]
    update["object"]["metadata"]["name"] = created_meta["name"]
    update["object"]["metadata"]["labels"] = created_meta["labels"]
    await h.feed(to_work(w, update, BOB))
    await h.settle_time(5)
    diff = [
        line
        for line in git(h.remote, "diff", "main~1", "main", "-U0").splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    assert diff == ["-  key: value", "+  key: updated"]
    assert log_lines(h.remote, fmt="%an|%s")[-1].startswith("Bob|[UPDATE] v1/configmaps/")


async def test_deletecollection_is_one_commit_by_the_deleter(tmp_path: Path) -> None:
    """Scenario 16: one DELETED per object, same author within W → one commit naming N resources."""
    h = Harness(tmp_path)
    w = Work(step_ms=100)
    for name in ("cm-a", "cm-b", "cm-c"):
        event = recorded("configmap/deletecollection", f"watch.deleted.{name}.yaml")
        added = {"type": "ADDED", "object": event["object"]}
        await h.feed(to_work(w, added, ALICE))
    await h.settle_time(5)
    for name in ("cm-a", "cm-b", "cm-c"):
        await h.feed(to_work(w, recorded("configmap/deletecollection", f"watch.deleted.{name}.yaml"), BOB))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%an|%s") == [
        "Alice Example|alice@example.com on t1: 3 resource(s)",
        "Bob|bob on t1: 3 resource(s)",
    ]
    body = git(h.remote, "log", "-1", "--format=%B", "main")
    assert "DELETE v1/configmaps/team-a/cm-a" in body
    assert files(h.remote) == {}


async def test_graceful_pod_delete_removes_at_intent_and_final_delete_is_a_no_op(tmp_path: Path) -> None:
    """Scenario 15: the Terminating MODIFIED removes the file; the later DELETED makes no commit."""
    h = Harness(tmp_path)
    w = Work(step_ms=10_000)
    modified = recorded("pod/graceful-delete", "watch.modified.yaml")
    live: dict[str, Any] = {"type": "ADDED", "object": {k: v for k, v in modified["object"].items()}}
    live["object"]["metadata"] = {
        k: v for k, v in modified["object"]["metadata"].items() if k != "deletionTimestamp"
    }
    await h.feed(to_work(w, live, ALICE, "pods"))
    await h.settle_time(5)
    assert len(files(h.remote)) == 1
    await h.feed(to_work(w, modified, BOB, "pods"))
    await h.feed(to_work(w, recorded("pod/graceful-delete", "watch.deleted.yaml"), ALICE, "pods"))
    await h.settle_time(5)
    assert [s.split("|")[0] for s in log_lines(h.remote, fmt="%an|%s")] == ["Alice Example", "Bob"]
    assert files(h.remote) == {}
