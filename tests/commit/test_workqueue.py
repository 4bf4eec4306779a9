"""A branch's queue is bounded by the objects it holds, not by records (pipeline/commit/workqueue.py).

A first sync's chunks carry thousands of objects each; a queue of a thousand records held the
whole collection decoded ahead of a worker that plans it far slower (issue 32).
"""

from __future__ import annotations

import asyncio

import pytest

from pipeline.codec.branch_work import ResyncChunk, ResyncObject, WorkItem
from pipeline.codec.stream_id import StreamId
from pipeline.commit.workqueue import WorkQueue, weight
from tests.commit.helpers import Work, cm


def chunk(objects: int, offset: int = 0) -> WorkItem:
    body = ResyncChunk(1, 0, tuple(ResyncObject("ns", f"o{i}", "u", "1", b"{}") for i in range(objects)))
    return WorkItem(0, offset, "git", "main", "live", StreamId("t", "c", "", "v1", "configmaps", ""), 0, body)


def test_a_chunk_weighs_its_objects_and_any_other_record_one() -> None:
    assert weight(chunk(2_500)) == 2_501
    assert weight(Work().create(cm("a"))) == 1


async def test_chunks_fill_the_queue_by_their_objects() -> None:
    queue = WorkQueue(100)
    queue.put_nowait(chunk(60, 0))
    assert not queue.full()
    queue.put_nowait(chunk(60, 1))
    assert queue.full(), "two chunks of 60 objects weigh past a bound of 100"
    with pytest.raises(asyncio.QueueFull):
        queue.put_nowait(chunk(1, 2))
    waiting = asyncio.ensure_future(queue.put(chunk(1, 3)))
    await asyncio.sleep(0)
    assert not waiting.done(), "the fetch loop waits while the queue is full"
    assert queue.get_nowait().offset == 0
    await waiting
    assert [queue.get_nowait().offset for _ in range(queue.qsize())] == [1, 3]
    assert queue.held == 0


async def test_a_chunk_heavier_than_the_bound_still_enters_an_empty_queue() -> None:
    queue = WorkQueue(10)
    await queue.put(chunk(50))
    assert queue.full()
    assert (await queue.get()).offset == 0
    assert not queue.full()


async def test_records_that_carry_no_objects_count_one_each() -> None:
    queue = WorkQueue(3)
    w = Work()
    for name in ("a", "b"):
        queue.put_nowait(w.create(cm(name)))
    assert not queue.full()
    queue.put_nowait(w.create(cm("c")))
    assert queue.full()
