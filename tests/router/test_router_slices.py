"""The router gives the event loop back between the records of a fetch and of a batch it commits.

A fetch of snapshot chunks (up to 4 MiB each) decoded in one go, or their work encoded in one go,
held the loop for 40-55 ms of CPU in a 10,000-object first sync (docs/operations.md). The router's
`Slicer` is replaced by one whose slice is always used up (a pause after every record) or never
(the router as it was): a task that notes every turn of the loop shows whether another task ran
between two records. No clock is involved. On the embedded log; the slicing is the router's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.log.api import Log, TopicPartition
from pipeline.router import Router
from pipeline.slices import Slicer
from tests.router.test_router import added, destinations, prepare, read_work
from tests.support.wait import wait_for

OBJECTS = 6
SLOTS = 100


def _back_to_back(timeline: list[str], step: str) -> bool:
    """Whether two `step`s ran with no other task's turn between them."""
    return any(a == b == step for a, b in itertools.pairwise(timeline))


@pytest.mark.parametrize("backend", ["embedded"])
@pytest.mark.parametrize("slice_ms", [0.0, 1e9], ids=["slice-used-up", "slice-never-used-up"])
async def test_the_router_pauses_between_records_once_a_slice_is_used_up(
    any_log: Log, settings: Settings, monkeypatch: pytest.MonkeyPatch, slice_ms: float
) -> None:
    topics = await prepare(any_log, settings)
    records = added(f"cm-{n}" for n in range(OBJECTS))
    await any_log.append_many(topics.watch_events, records)
    router = Router(any_log, topics, destinations(), None, group_id=f"g-slices-{slice_ms:.0f}")
    router._slicer = Slicer(slice_ms)
    timeline: list[str] = []
    admit, work_for = router._admit, router._work_for

    def noted_admit(record: Any) -> Any:
        timeline.append("decode")
        return admit(record)

    def noted_work_for(pending: Any) -> Any:
        timeline.append("encode")
        return work_for(pending)

    monkeypatch.setattr(router, "_admit", noted_admit)
    monkeypatch.setattr(router, "_work_for", noted_work_for)

    async def note_turns() -> None:
        while True:
            timeline.append("turn")
            await asyncio.sleep(0)

    turns = asyncio.create_task(note_turns())
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, OBJECTS)
    finally:
        await router.stop()
        turns.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turns
    assert [item["body"][1]["name"] for item in items] == [f"cm-{n}" for n in range(OBJECTS)]
    assert timeline.count("decode") == timeline.count("encode") == OBJECTS
    if slice_ms == 0.0:
        assert not _back_to_back(timeline, "decode"), timeline
        assert not _back_to_back(timeline, "encode"), timeline
    else:
        # the same fetch and batch without pauses: the records ran back to back (the case above
        # is not met by chance of the log returning one record per fetch)
        assert _back_to_back(timeline, "decode"), timeline
        assert _back_to_back(timeline, "encode"), timeline


@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_reset_during_a_pause_drops_the_batch_instead_of_committing_it(
    any_log: Log, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = await prepare(any_log, settings)
    records = added(f"cm-{n}" for n in range(OBJECTS))
    appended = await any_log.append_many(topics.watch_events, records)
    assert len({result.partition for result in appended}) == 1  # one stream: one partition
    router = Router(any_log, topics, destinations(), None, group_id="g-slices-reset", max_in_flight=SLOTS)
    router._slicer = Slicer(0.0)
    commits: list[object] = []
    work_for, commit = router._work_for, router._commit_until_done
    encoded: list[object] = []
    first_encoded = asyncio.Event()

    def noted_work_for(pending: Any) -> Any:
        encoded.append(pending)
        first_encoded.set()
        return work_for(pending)

    async def noted_commit(*args: Any) -> Any:
        commits.append(args)
        return await commit(*args)

    monkeypatch.setattr(router, "_work_for", noted_work_for)
    monkeypatch.setattr(router, "_commit_until_done", noted_commit)

    async def reset_while_encoding() -> None:
        await first_encoded.wait()
        # the partition is taken away while the batch pauses between two of its records
        router._forget({TopicPartition(topics.watch_events, appended[0].partition)})

    resetting = asyncio.create_task(reset_while_encoding())
    await router.start()
    try:
        await resetting
        await wait_for(lambda: router._slots._value == SLOTS, what="the batch's slots released")
    finally:
        await router.stop()
    assert len(encoded) == OBJECTS  # the batch was encoded, the reset came while it paused
    assert commits == []
