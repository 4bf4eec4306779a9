"""Custom-resource mode: an event of a target the router does not know yet makes it catch the
configuration up once before it decides, so a stream a newer version started is not dropped."""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.demo.recording import WatchStep
from pipeline.log.api import Log
from pipeline.router import Router
from tests.router.test_router import (
    ScriptedLookup,
    append_live,
    configmap,
    destinations,
    prepare,
    read_work,
    single_partition_of,
    wait_committed,
)


async def test_unknown_targets_catch_the_configuration_up_once(any_log: Log, settings: Settings) -> None:
    topics = await prepare(any_log, settings)
    await append_live(any_log, topics, [WatchStep("ADDED", configmap("x", "1"))], target="gone")
    steps = [WatchStep("ADDED", configmap("y", "1")), WatchStep("MODIFIED", configmap("y", "2"))]
    await append_live(any_log, topics, steps)
    router = Router(any_log, topics, {}, ScriptedLookup({"y": "bob"}), group_id="g-refresh")
    asked: list[int] = []

    async def refresh() -> None:
        # what the service does: read the config topic, hand the newer version to the stages
        asked.append(1)
        router.set_destinations(destinations())

    router.refresh_config = refresh
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, 2)
        tp = await single_partition_of(any_log, topics.watch_events)
        await wait_committed(any_log, "g-refresh", tp, 3)
    finally:
        await router.stop()
    writes = [item["body"][1] for item in items]
    assert [(w["name"], w["resourceVersion"]) for w in writes] == [("y", "1"), ("y", "2")]
    assert [w["author"]["username"] for w in writes] == ["bob", "bob"]
    # the first unknown target ("gone") asked; the version it brought made "shop" known, so its
    # events needed no second ask; "gone" stays unknown and is dropped
    assert asked == [1]
    assert router.stats.dropped == 1
