"""The follower's per-stream bookkeeping stays bounded however many streams the facts topic holds (12.3)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pipeline.attribution import FactFollower, FactIndex
from pipeline.attribution.follower import MAX_CACHED_STREAMS, MAX_STREAM_LABELS
from pipeline.codec.fact_batch import FactBatch
from pipeline.config import Settings
from pipeline.log.embedded import EmbeddedLog
from pipeline.models import GroupResource
from tests.attribution.helpers import fact
from tests.attribution.test_follower import GUARD_S, create_fact_topic, record_for, topics_of


async def test_a_flood_of_distinct_streams_keeps_the_stream_caches_bounded(tmp_path: Path) -> None:
    settings = Settings(workdir=tmp_path)
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    streams = MAX_CACHED_STREAMS + 500
    try:
        topic = await create_fact_topic(log, settings)
        facts = [fact(name="a", uid="u")]
        records = [
            record_for(FactBatch("default", GroupResource(f"g{i}.example", "things"), facts))
            for i in range(streams)
        ]
        await log.append_many(topic, records)
        index = FactIndex.from_settings(settings.attribution)
        follower = FactFollower(log, topics_of(settings), index, settings)
        await follower.start()
        try:
            await asyncio.wait_for(follower.wait_ready(), GUARD_S)
            assert follower.records_applied == streams
            assert len(follower._gr_keys) <= MAX_CACHED_STREAMS
            assert follower._streams, "the follower tracked no stream"
            assert all(len(seen) <= MAX_STREAM_LABELS for seen in follower._streams.values())
        finally:
            await follower.stop()
    finally:
        await log.close()
