"""A target in configured-author mode is routed without attribution; one in audit mode as before.

The lookup in configured-author mode is a double that would hold every resolution forever, so the
work item can only appear because the router never asked it: no grace, no hold, no wait. With
attribution on, the real resolver over an empty fact index settles unresolved, as it always did.
"""

from __future__ import annotations

import asyncio
from typing import cast

from prometheus_client import REGISTRY

from pipeline.attribution import FactIndex, Resolver
from pipeline.authormode import AttributionMode
from pipeline.codec.branch_work import Removal, WorkAuthor
from pipeline.codec.watch_event import WatchRecord
from pipeline.config import AttributionSettings, ClusterSettings, ProviderSettings, Settings, TargetSettings
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames
from pipeline.router import Router
from pipeline.router.component import destinations
from pipeline.router.events import CaughtUp, Destination
from pipeline.router.lookup import query_for, work_author
from tests.router.test_router import CONFIGMAPS, append_live, configmap, prepare, read_work

CONFIGURED = {"shop": Destination("repo", "main", "clusters/default", AttributionMode.CONFIGURED_AUTHOR)}


class HoldingLookup:
    """Holds every resolution until the test ends: any call shows the router waited for attribution."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._never = asyncio.Event()

    async def wait_ready(self) -> None:
        return None

    def ready(self) -> bool:
        return True

    async def author_for(self, watch: WatchRecord) -> WorkAuthor:
        self.calls.append("author_for")
        await self._never.wait()
        raise AssertionError("unreachable")

    def resume_versions(self, partition: int, committed: int) -> None:
        pass

    def note_version(self, watch: WatchRecord) -> None:
        pass

    async def catch_up(self, watch: WatchRecord) -> list[CaughtUp]:
        self.calls.append("catch_up")
        await self._never.wait()
        raise AssertionError("unreachable")

    async def removals_for(self, watch: WatchRecord) -> list[Removal]:
        self.calls.append("removals_for")
        await self._never.wait()
        raise AssertionError("unreachable")


class ResolverLookup:
    """The production resolution (`IndexLookup.author_for`) on an index no fact ever reaches."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    async def wait_ready(self) -> None:
        return None

    def ready(self) -> bool:
        return True

    async def author_for(self, watch: WatchRecord) -> WorkAuthor:
        return work_author(await self.resolver.resolve(query_for(watch)))

    def resume_versions(self, partition: int, committed: int) -> None:
        pass

    def note_version(self, watch: WatchRecord) -> None:
        pass

    async def catch_up(self, watch: WatchRecord) -> list[CaughtUp]:
        return []

    async def removals_for(self, watch: WatchRecord) -> list[Removal]:
        return []


def _not_attempted(target: str) -> float:
    sample = REGISTRY.get_sample_value("reverser_router_attribution_not_attempted_total", {"target": target})
    return sample or 0.0


def _mode_gauge(target: str, mode: str) -> float | None:
    return REGISTRY.get_sample_value("reverser_router_attribution_mode", {"target": target, "mode": mode})


async def test_configured_author_routes_every_record_without_asking_for_an_author(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    await append_live(
        any_log,
        topics,
        [
            WatchStep("ADDED", configmap("a", "1")),
            WatchStep("MODIFIED", configmap("a", "2")),
            WatchStep("DELETED", configmap("a", "3")),
        ],
    )
    builder = WatchRecordBuilder("default", "default", "shop", "shop")
    await any_log.append_many(
        topics.watch_events, builder.snapshot(CONFIGMAPS, "v1", 9, "5", [configmap("b", "4")])
    )
    before = _not_attempted("shop")
    lookup = HoldingLookup()
    router = Router(any_log, topics, CONFIGURED, lookup, group_id="g-configured")
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 6)
    finally:
        await router.stop()
    assert lookup.calls == []
    writes = [item["body"][1] for item in items[:3]]
    assert [w["operation"] for w in writes] == ["CREATE", "UPDATE", "DELETE"]
    assert all(w["author"]["outcome"] == "NOT_ATTEMPTED" for w in writes)
    assert all(w["author"]["username"] == "" for w in writes)
    # the commit's Reverser-Attribution trailer says why no person is named
    assert all(w["author"]["tier"] == "configured-author" for w in writes)
    # the snapshot end carries no deletion evidence: attribution was not attempted for it either
    assert items[5]["body"][1]["removals"] is None
    # the three live events and the snapshot end; the baseline's begin and chunk need nothing anyway
    assert _not_attempted("shop") == before + 4
    assert _mode_gauge("shop", "configured-author") == 1.0


async def test_audit_mode_without_a_fact_settles_unresolved_as_before(
    any_log: Log, settings: Settings
) -> None:
    topics = await prepare(any_log, settings)
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("a", "1"))])
    before = _not_attempted("shop")
    lookup = ResolverLookup(Resolver(FactIndex.from_settings(AttributionSettings()), grace_ms=0))
    audit = {"shop": Destination("repo", "main", "clusters/default")}
    router = Router(any_log, topics, audit, lookup, group_id="g-audit")
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 1)
    finally:
        await router.stop()
    author = items[0]["body"][1]["author"]
    assert (author["outcome"], author["tier"]) == ("UNRESOLVED", "absent")
    assert _not_attempted("shop") == before
    assert _mode_gauge("shop", "audit") == 1.0


def test_a_target_takes_its_own_mode_else_its_cluster_mode() -> None:
    provider = ProviderSettings(name="repo", url="https://git.example.com/r.git", default_branch="main")
    settings = Settings(
        clusters=[
            ClusterSettings(name="eks", attribution=AttributionMode.CONFIGURED_AUTHOR),
            ClusterSettings(name="onprem"),
        ],
        providers=[provider],
        targets=[
            TargetSettings(name="managed", provider="repo", path="managed", cluster="eks"),
            TargetSettings(
                name="audited",
                provider="repo",
                path="audited",
                cluster="eks",
                attribution=AttributionMode.AUDIT,
            ),
            TargetSettings(name="onprem", provider="repo", path="onprem", cluster="onprem"),
        ],
    )
    modes = {name: d.attribution for name, d in destinations(settings).items()}
    assert modes == {
        "managed": AttributionMode.CONFIGURED_AUTHOR,
        "audited": AttributionMode.AUDIT,
        "onprem": AttributionMode.AUDIT,
    }


def test_a_changed_mode_moves_the_gauge() -> None:
    router = Router(cast(Log, None), TopicNames.for_prefix("gauge"), CONFIGURED, None, group_id="g-gauge")
    assert _mode_gauge("shop", "configured-author") == 1.0
    router.set_destinations({"shop": Destination("repo", "main", "clusters/default")})
    assert _mode_gauge("shop", "configured-author") is None
    assert _mode_gauge("shop", "audit") == 1.0


def test_a_cluster_without_a_mode_takes_its_audit_routes() -> None:
    """A route whose apiserver delivers no audit events says so once for every cluster posting on
    it; a cluster's own mode, and a target's, still win."""
    provider = ProviderSettings(name="repo", url="https://git.example.com/r.git", default_branch="main")
    settings = Settings.model_validate(
        {
            "audit": {
                "routes": [
                    {"name": "managed", "attribution": "configured-author"},
                    {"name": "default"},
                ]
            },
            "clusters": [
                {"name": "eks-1", "audit_route": "managed"},
                {"name": "eks-2", "audit_route": "managed", "attribution": "audit"},
                {"name": "managed"},  # its route is its name
                {"name": "onprem", "audit_route": "default"},
                {"name": "unrouted", "audit_route": "nowhere"},
            ],
            "providers": [provider.model_dump()],
            "targets": [
                {"name": "a", "provider": "repo", "path": "a", "cluster": "eks-1"},
                {"name": "b", "provider": "repo", "path": "b", "cluster": "eks-2"},
                {"name": "c", "provider": "repo", "path": "c", "cluster": "managed"},
                {"name": "d", "provider": "repo", "path": "d", "cluster": "onprem"},
                {"name": "e", "provider": "repo", "path": "e", "cluster": "unrouted"},
                {"name": "f", "provider": "repo", "path": "f", "cluster": "eks-1", "attribution": "audit"},
            ],
        }
    )
    modes = {name: str(d.attribution) for name, d in destinations(settings).items()}
    assert modes == {
        "a": "configured-author",
        "b": "audit",
        "c": "configured-author",
        "d": "audit",
        "e": "audit",
        "f": "audit",
    }
