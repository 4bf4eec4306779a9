"""A rule's `operations`: which changes of its types reach Git (CREATE adds a file, UPDATE changes
one, DELETE removes one), whether the change arrives as a watch event or is inferred from a snapshot.

The decision without I/O (`TargetRules.operations`), the custom-resource mapping, then the commit
worker on a real log (embedded and Kafka) and a real bare Git remote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from pipeline.config import ProviderSettings, Settings, TargetSettings, WatchRule
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.export import export_resources
from pipeline.customresources.objects import parse_object
from pipeline.log.api import Log
from pipeline.models import GroupResource
from pipeline.targetrules import ALL_OPERATIONS, TargetRules
from tests.commit.helpers import Work, bare_remote, cm, files
from tests.commit.logwork import append_work, commit_all

CM = GroupResource("", "configmaps")


def _filtered() -> float:
    return REGISTRY.get_sample_value("reverser_commit_skipped_total", {"reason": "operation_filtered"}) or 0.0


def test_rules_naming_a_type_are_an_or_and_unnamed_types_are_not_filtered() -> None:
    rules = TargetRules.of(
        TargetSettings(
            name="t",
            provider="p",
            rules=[
                WatchRule(resources=["configmaps"], namespaces=["a"], operations=["CREATE"]),
                WatchRule(resources=["configmaps"], namespaces=["a", "b"], operations=["UPDATE"]),
                WatchRule(resources=["apps/deployments"], namespaces=["a"]),
            ],
        )
    )
    assert rules.operations(CM, "a") == {"CREATE", "UPDATE"}
    assert rules.operations(CM, "b") == {"UPDATE"}
    assert rules.operations(GroupResource("apps", "deployments"), "a") == ALL_OPERATIONS
    assert rules.operations(GroupResource("batch", "cronjobs"), "a") == ALL_OPERATIONS


def test_custom_resource_operations_map_to_the_rule_and_export_back() -> None:
    def rule(operations: list[str] | None) -> dict[str, Any]:
        item: dict[str, Any] = {"resources": ["configmaps"]}
        if operations is not None:
            item["operations"] = operations
        return item

    documents = [
        {
            "apiVersion": "configbutler.ai/v1alpha3",
            "kind": "GitProvider",
            "metadata": {"name": "repo", "namespace": "reverser"},
            "spec": {"url": "https://git.example.com/x.git", "allowedBranches": ["main"]},
        },
        {
            "apiVersion": "configbutler.ai/v1alpha3",
            "kind": "GitTarget",
            "metadata": {"name": "t", "namespace": "reverser"},
            "spec": {"providerRef": {"name": "repo"}, "branch": "main", "path": "t"},
        },
        {
            "apiVersion": "configbutler.ai/v1alpha3",
            "kind": "WatchRule",
            "metadata": {"name": "r", "namespace": "reverser"},
            "spec": {
                "targetRef": {"name": "t"},
                "rules": [
                    rule(["CREATE", "UPDATE"]),
                    rule(["*"]),
                    rule(None),
                    rule(["DELETE", "UPDATE", "CREATE"]),
                ],
            },
        },
    ]
    compiled = compile_resources([parse_object(d) for d in documents], home_namespace="reverser")
    assert all(not r.unsupported for r in compiled.reports.values())
    assert [r.operations for r in compiled.targets[0].rules] == [["CREATE", "UPDATE"], [], [], []]
    back = export_resources(compiled.settings(Settings()), "reverser")
    rules = next(d for d in back if d["kind"] == "WatchRule")["spec"]["rules"]
    assert rules[0]["operations"] == ["CREATE", "UPDATE"]
    assert "operations" not in rules[1]
    bad = [*documents[:2], {**documents[2], "spec": {"targetRef": {"name": "t"}, "rules": [rule(["PATCH"])]}}]
    report = compile_resources([parse_object(d) for d in bad], home_namespace="reverser").reports
    errors = [e for r in report.values() for e in r.errors]
    assert [e.path for e in errors] == ["spec.rules[0].operations[0]"]


async def test_the_commit_worker_applies_only_the_allowed_changes(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = settings.model_copy(
        update={
            "providers": [
                ProviderSettings(name="git", url=str(remote), commit_window_s=0.1, push_cooldown_s=0.1)
            ],
            "targets": [
                TargetSettings(
                    name="t1",
                    provider="git",
                    path="live",
                    prune="Always",
                    rules=[
                        # team-a: no deletions (the folder only gains and changes files)
                        WatchRule(
                            resources=["configmaps"], namespaces=["team-a"], operations=["CREATE", "UPDATE"]
                        ),
                        # team-b: only new objects (a file, once written, is never changed or removed)
                        WatchRule(resources=["configmaps"], namespaces=["team-b"], operations=["CREATE"]),
                    ],
                )
            ],
        }
    )
    w = Work(step_ms=10)
    before = _filtered()
    await append_work(
        any_log,
        cfg,
        [
            w.create(cm("a1")),
            w.create(cm("a2")),
            w.delete("a1"),  # filtered: no DELETE in team-a
            w.create(cm("b1", namespace="team-b")),
            w.update(cm("b1", namespace="team-b", key="changed")),  # filtered: no UPDATE in team-b
            w.delete("b1", namespace="team-b"),  # filtered
            # a snapshot of team-a without a2 (prune Always would sweep it) and with a3 (created)
            *w.snapshot(1, [cm("a1"), cm("a3")], scope="team-a"),
            # a snapshot of team-b listing b1 changed (an UPDATE: filtered) and b2 (a CREATE)
            *w.snapshot(
                1, [cm("b1", namespace="team-b", key="again"), cm("b2", namespace="team-b")], scope="team-b"
            ),
        ],
    )
    await commit_all(any_log, cfg)
    tree = files(remote)
    assert sorted(tree) == [
        "live/team-a/configmaps/a1.yaml",
        "live/team-a/configmaps/a2.yaml",
        "live/team-a/configmaps/a3.yaml",
        "live/team-b/configmaps/b1.yaml",
        "live/team-b/configmaps/b2.yaml",
    ]
    assert "key: value" in tree["live/team-b/configmaps/b1.yaml"]  # as created, never updated
    # the live records skipped: a1's delete, b1's update and delete
    assert _filtered() - before == 3
