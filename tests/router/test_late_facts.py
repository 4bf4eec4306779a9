"""Late facts end to end on a real log: a change routed as unresolved is named once its fact comes.

A real fact follower and index, the router with its late watch, the real commit worker and a bare
Git remote: a live event whose audit batch arrives after the hold is committed as `unknown
(attribution unresolved)`; when the batch does arrive, the router appends a `LateAuthor` record to
the same branch partition and the commit worker notes the author on the pushed commit, which stays
as it was.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.attribution import FactFollower, FactIndex, Resolver
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.commit.consumer import CommitWorker
from pipeline.commit.notes import parse_late_lines
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.demo.recording import WatchStep
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource
from pipeline.router import Router
from pipeline.router.events import Destination
from pipeline.router.late import LateWatch
from pipeline.router.lookup import IndexLookup
from tests.attribution.helpers import fact
from tests.attribution.test_follower import record_for
from tests.commit.helpers import bare_remote, git
from tests.commit.logwork import wait_settled
from tests.router.test_router import append_live, configmap, read_work
from tests.support.wait import wait_for

CM = GroupResource("", "configmaps")
GUARD_S = 30.0
REF = "refs/notes/reverser-authors/main"


def late(outcome: str) -> float:
    return REGISTRY.get_sample_value("reverser_router_late_resolutions_total", {"outcome": outcome}) or 0.0


def note(remote: Path) -> str:
    found = subprocess.run(
        ["git", "--git-dir", str(remote), "notes", f"--ref={REF}", "show", "main"],
        capture_output=True,
        text=True,
    )
    return found.stdout if found.returncode == 0 else ""


async def route_late(
    log: Log, settings: Settings, tmp_path: Path, late_fact: AuthorFact, late_window_s: float
) -> tuple[Path, list[str], list[str]]:
    """Route b@9 with no fact (a short hold), commit it, then file `late_fact`.

    Returns the remote, the authors of b's commits, and the branch-work kinds once the late watch ended.
    """
    remote = bare_remote(tmp_path / "remote.git")
    cfg = settings.model_copy(
        update={
            "providers": [
                ProviderSettings(name="repo", url=str(remote), commit_window_s=0.2, push_cooldown_s=0.2)
            ],
            "targets": [TargetSettings(name="shop", provider="repo", path="live")],
        }
    )
    topics = TopicNames.for_prefix(cfg.log.topic_prefix)
    await log.create_topics(topic_specs(cfg))
    index = FactIndex.from_settings(cfg.attribution)
    follower = FactFollower(log, topics, index, cfg, fetch_timeout_ms=100)
    await follower.start()
    lookup = IndexLookup(follower, Resolver(index, grace_ms=200, max_wait_ms=400))
    watch = LateWatch(log, topics.branch_work, lookup.late_author, late_window_s)
    router = Router(
        log, topics, {"shop": Destination("repo", "main", "live")}, lookup, group_id="g-late", late=watch
    )
    worker = CommitWorker(cfg, log)
    try:
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        await append_live(log, topics, [WatchStep("MODIFIED", configmap("b", "9"))])
        await router.start()
        await worker.start()
        await wait_for(
            lambda: watch.watching == 1, what="the unresolved change to be watched", timeout_s=GUARD_S
        )
        await wait_settled(log, cfg)
        await log.append_many(topics.audit_facts, [record_for(FactBatch("default", CM, [late_fact]))])
        await wait_for(lambda: watch.watching == 0, what="the late watch to end", timeout_s=GUARD_S)
        await wait_settled(log, cfg)
        kinds = [item["body"][0].rsplit(".", 1)[1] for item in await read_work(log, topics.branch_work, 1)]
    finally:
        await worker.stop()
        await router.stop()
        await follower.stop()
    authors = git(remote, "log", "--format=%an", "main", "--", "live/shop/configmaps/b.yaml").split("\n")
    return remote, [a for a in authors if a], kinds


async def test_a_fact_that_comes_after_the_hold_names_the_author_in_a_git_note(
    any_log: Log, settings: Settings, tmp_path: Path
) -> None:
    resolved = late("resolved")
    now_us = int(time.time() * 1_000_000)
    alice = fact("alice", "update", ns="shop", name="b", uid="uid-b", rv="9", stage_us=now_us)
    remote, authors, kinds = await route_late(any_log, settings, tmp_path, alice, GUARD_S)
    assert authors == ["unknown (attribution unresolved)"], "the pushed commit is not rewritten"
    assert "LateAuthor" in kinds
    assert late("resolved") == resolved + 1
    [named] = parse_late_lines(note(remote))
    assert (named.path, named.resource_version, named.username, named.tier) == (
        "live/shop/configmaps/b.yaml",
        "9",
        "alice",
        "exact",
    )


async def test_a_late_fact_that_does_not_pin_the_version_names_nobody(
    any_log: Log, settings: Settings, tmp_path: Path
) -> None:
    """A name-keyed fact that comes late may be about a later change of b: no note, ever."""
    expired = late("expired")
    now_us = int(time.time() * 1_000_000)
    by_name = fact("mallory", "update", ns="shop", name="b", stage_us=now_us)
    remote, authors, kinds = await route_late(any_log, settings, tmp_path, by_name, 1.0)
    assert authors == ["unknown (attribution unresolved)"]
    assert late("expired") == expired + 1
    assert "LateAuthor" not in kinds
    assert note(remote) == ""
