"""Zombie fencing of a watch leader through the log (issue 13.2), on both backends.

The paused leader is simulated in-process by freezing its lease renewals (its election loop never
wakes again) while its watch connection stays open, so it still receives the next change and tries
to append it after its successor took over. The real thing, with `reverser run` processes and
SIGSTOP/SIGCONT on Kafka, is tests/watch/test_fencing_processes.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from pipeline.codec import SCHEMA_HEADER
from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames
from pipeline.watch.component import WatchComponent
from pipeline.watch.writer import WRITER_HEADER
from tests.support.logread import read_topic
from tests.support.wait import wait_for
from tests.watch.conftest import fast_options, kinds, metric, read_events
from tests.watch.kube_server import FakeKubeApiServer, corpus_object
from tests.watch.test_leader import elected, streaming


async def writers(log: Log, settings: Settings) -> list[str]:
    """The writer header of every watch-events record, in log order (one partition here)."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).watch_events
    return [
        (record.header(WRITER_HEADER) or b"").decode()
        for record in await read_topic(log, topic)
        if record.header(SCHEMA_HEADER) is not None
    ]


async def never(_delay_s: float) -> None:
    await asyncio.Event().wait()


async def test_a_leader_that_missed_its_lease_cannot_append_after_its_successor_started(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    config = elected(settings, kube.kubeconfig(tmp_path))
    zombie = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-1")
    await zombie.start()
    successor = WatchComponent(config, topics_log, options=fast_options(config), identity="replica-2")
    fenced_before = metric("reverser_watch_fenced_total", cluster="src")
    try:
        await wait_for(lambda: streaming(zombie), what="the first replica to lead")
        elector = zombie.manager._clusters["src"].shards[0].elector
        assert elector is not None
        # its renewals stop, as in a pause; its watch stays connected
        elector.terms = dataclasses.replace(elector.terms, sleep=never)
        await successor.start()
        await wait_for(lambda: streaming(successor), timeout_s=30, what="the successor to take over")
        assert zombie.manager.streams  # the zombie still believes it leads
        kube.put(corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a"))
        await wait_for(lambda: not zombie.manager.streams, timeout_s=30, what="the zombie to step down")
        assert metric("reverser_watch_fenced_total", cluster="src") == fenced_before + 1

        async def successor_wrote_the_change() -> bool:
            # it resumes from the zombie's cursor: the new change is its first record
            return "replica-2" in await writers(topics_log, config)

        await wait_for(successor_wrote_the_change, timeout_s=30, what="the successor's records")
    finally:
        await successor.stop()
        await zombie.stop()
    written = await writers(topics_log, config)
    first_successor = written.index("replica-2")
    assert set(written[:first_successor]) == {"replica-1"}
    assert set(written[first_successor:]) == {"replica-2"}
    assert kinds(await read_events(topics_log, config))[first_successor:] == ["ADDED cm-collapse"]
