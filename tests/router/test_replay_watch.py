"""`reverser replay watch-events`: one target's watch history becomes branch-work for a new target.

On both backends: the new target's rules (namespaces, label selector) narrow the history, a
snapshot keeps only the selected objects and its end counts them, and authors come from the fact
index rebuilt from audit-facts by the router's own follower and resolver, so they equal what the
live router named for the source target. The commit worker then commits the replayed work.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main
from pipeline.codec.fact_batch import FactBatch
from pipeline.config import Settings, TargetSettings
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log import Log
from pipeline.log.embedded import EmbeddedLog
from pipeline.models import GroupResource, branch_key
from pipeline.router.component import RouterComponent
from pipeline.router.replay_cli import ReplayWatchError, replay_watch_events
from pipeline.targetrules import TargetRules
from tests.attribution.helpers import fact
from tests.attribution.test_follower import record_for
from tests.commit.helpers import bare_remote, files, log_lines
from tests.commit.logwork import commit_all
from tests.router.test_router import prepare, read_work

CM = GroupResource("", "configmaps")


def _settings(settings: Settings, remote: Path, copy_rules: list[dict[str, Any]]) -> Settings:
    return Settings.model_validate(
        {
            **settings.model_dump(mode="json"),
            "attribution": {"grace_ms": 100, "max_wait_ms": 3000, "reorder_ms": 0},
            "providers": [
                {"name": "repo", "url": str(remote), "commit_window_s": 0.1, "push_cooldown_s": 0.1}
            ],
            "targets": [
                {"name": "shop", "provider": "repo", "branch": "main", "path": "clusters/default"},
                {
                    "name": "shop-copy",
                    "provider": "repo",
                    "branch": "copy",
                    "path": "copy",
                    "rules": copy_rules,
                },
            ],
        }
    )


def cm(name: str, rv: str, namespace: str = "shop", tier: str = "web") -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": {"tier": tier},
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": rv}}


WEB_IN_SHOP = [{"resources": ["configmaps"], "namespaces": ["shop"], "label_selector": "tier=web"}]


def test_rules_select_by_type_namespace_labels_and_never_denylisted_or_plain_secrets() -> None:
    rules = TargetRules.of(
        TargetSettings.model_validate(
            {
                "name": "t",
                "provider": "p",
                "rules": [
                    *WEB_IN_SHOP,
                    {"resources": ["apps/deployments", "pods", "secrets"], "cluster_wide": True},
                    {"resources": ["namespaces"]},
                ],
            }
        )
    )
    assert rules.selects(CM, "shop", {"tier": "web"})
    assert not rules.selects(CM, "shop", {"tier": "db"}), "label selector"
    assert not rules.selects(CM, "other", {"tier": "web"}), "namespace"
    assert not rules.selects(CM, "", {"tier": "web"}), "namespaced rules never select cluster-scoped objects"
    assert rules.selects(GroupResource("apps", "deployments"), "any", {})
    assert not rules.selects(GroupResource("extensions", "deployments"), "any", {}), "group/resource is exact"
    assert not rules.selects(GroupResource("", "pods"), "any", {}), "denylisted"
    assert not rules.selects(GroupResource("", "secrets"), "any", {}), "Secrets need encryption"
    assert rules.selects(GroupResource("", "namespaces"), "", {})
    assert not rules.selects(GroupResource("", "namespaces"), "shop", {})
    assert rules.covers(CM, "shop")
    assert rules.covers(CM, "")
    assert not rules.covers(CM, "other")
    assert not rules.covers(GroupResource("", "services"), "")


async def test_watch_history_replays_for_a_new_target_under_its_rules_with_the_live_authors(
    any_log: Log, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = _settings(settings, remote, WEB_IN_SHOP)
    topics = await prepare(any_log, cfg)
    now_us = int(time.time() * 1_000_000)
    facts = [
        fact("alice", "create", ns="shop", name="a", uid="uid-a", rv="1", stage_us=now_us),
        fact("bob", "create", ns="shop", name="b", uid="uid-b", rv="2", stage_us=now_us),
        fact("carol", "update", ns="shop", name="a", uid="uid-a", rv="3", stage_us=now_us),
        fact("dave", "create", ns="shop", name="db", uid="uid-db", rv="4", stage_us=now_us),
        # later audit time: the watermark passes every event below, so nothing waits for more
        fact("erin", "update", ns="shop", name="zz", uid="uid-zz", rv="99", stage_us=now_us + 60_000_000),
    ]
    await any_log.append_many(topics.audit_facts, [record_for(FactBatch("default", CM, facts))])
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    watch = [
        builder.live(WatchStep("ADDED", cm("a", "1"))),
        builder.live(WatchStep("ADDED", cm("b", "2"))),
        builder.live(WatchStep("MODIFIED", cm("a", "3"))),
        builder.live(WatchStep("ADDED", cm("db", "4", tier="db"))),  # outside the copy's selector
        *builder.snapshot(CM, "v1", 1, "5", [cm("a", "3"), cm("b", "2"), cm("db", "4", tier="db")]),
    ]
    await any_log.append_many(topics.watch_events, watch)
    elsewhere = WatchRecordBuilder("default", "default", "shop", "other")
    outside = elsewhere.live(WatchStep("ADDED", cm("x", "6", "other")))
    await any_log.append_many(topics.watch_events, [outside])

    # the live pipeline routes the source target: its authors are the reference
    live = RouterComponent(cfg, any_log)
    await live.start()
    try:
        routed = await read_work(any_log, topics.branch_work, 8)
    finally:
        await live.stop()
    live_writes = [i["body"][1] for i in routed if i["body"][0].endswith("Write")]
    live_authors = {(w["name"], w["resourceVersion"]): w["author"]["username"] for w in live_writes}
    assert live_authors[("a", "1")] == "alice"
    assert live_authors[("a", "3")] == "carol"

    embedded = isinstance(any_log, EmbeddedLog)
    if embedded:
        await any_log.close()  # the embedded log admits one process at a time: the replay opens it
    written = await replay_watch_events(cfg, "shop", "shop-copy", print, tty=False)
    assert written == 6, "3 selected live events + begin, chunk, end"
    out = capsys.readouterr().out
    assert "appended 6 branch-work record(s) for shop-copy (repo copy)" in out
    assert "3 object(s) or event(s) of shop are outside shop-copy's rules" in out
    if embedded:
        await any_log.start()

    items = await read_work(any_log, topics.branch_work, 6, key=branch_key("repo", "copy"), other_keys=True)
    assert {(i["target"], i["path"], i["branch"]) for i in items} == {("shop-copy", "copy", "copy")}
    writes = [i["body"][1] for i in items if i["body"][0].endswith("Write")]
    assert [(w["name"], w["operation"]) for w in writes] == [
        ("a", "CREATE"),
        ("b", "CREATE"),
        ("a", "UPDATE"),
    ]
    assert (
        [w["author"]["username"] for w in writes]
        == [live_authors[(w["name"], w["resourceVersion"])] for w in writes]
        == ["alice", "bob", "carol"]
    )
    chunk, end = (i["body"][1] for i in items[4:6])
    assert [o["name"] for o in chunk["objects"]] == ["a", "b"], "the snapshot keeps the selected objects"
    assert end["objects"] == 2, "and its end counts them, so the commit worker accepts it"

    await commit_all(any_log, cfg)
    assert sorted(files(remote, "copy")) == ["copy/shop/configmaps/a.yaml", "copy/shop/configmaps/b.yaml"]
    authors = log_lines(remote, "copy", fmt="%an")
    assert authors[:3] == ["alice", "bob", "carol"]


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_bad_arguments_name_the_field(
    any_log: Log, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _settings(
        settings,
        bare_remote(tmp_path / "remote.git"),
        [{"resources": ["configmaps"], "cluster_wide": True, "label_selector": "tier in (web"}],
    )
    await prepare(any_log, cfg)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    await any_log.close()
    argv = ["replay", "watch-events", "--config", str(config), "--from-target", "shop", "--target"]
    assert await asyncio.to_thread(main, [*argv, "nope"]) == 2
    assert "'nope' is not a configured target" in capsys.readouterr().err
    assert await asyncio.to_thread(main, [*argv, "shop"]) == 2
    assert "must differ" in capsys.readouterr().err
    with pytest.raises(ReplayWatchError, match=r"targets\[shop-copy\]\.rules: label_selector"):
        await replay_watch_events(cfg, "shop", "shop-copy")
