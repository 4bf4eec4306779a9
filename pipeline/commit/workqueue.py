"""A branch's FIFO between the consumer's fetch loop and its worker, bounded by what it holds.

A queue bounded by records alone held a whole first sync: the worker plans a snapshot's objects
far slower than the fetch loop decodes them, and a chunk record carries thousands of objects, so
a thousand queued records were the collection's objects, decoded, ahead of the worker (issue 32's
memory budget). Here a snapshot chunk weighs one plus its objects, any other record one, and the
fetch loop waits once the queue weighs its bound, so a worker applying a snapshot has a few
thousand objects read ahead, never the collection. A record heavier than the bound still goes
into an empty queue, so no chunk can block its FIFO.
"""

from __future__ import annotations

import asyncio

from pipeline.codec.branch_work import ResyncChunk, WorkItem

__all__ = ["QUEUE_WEIGHT", "WorkQueue", "weight"]

#: Records (or objects of snapshot chunks) a branch's queue holds before the fetch loop waits: a
#: chunk of 1 KiB objects (about 2,900 in 4 MiB) fills it, so the worker has the next chunk at
#: hand and not two more (5,000 held about 5 MiB more at the busiest moment of a first sync).
QUEUE_WEIGHT = 2_000


def weight(item: WorkItem) -> int:
    """What a queued record holds: one, plus the objects of a snapshot chunk."""
    body = item.body
    return 1 + (len(body.objects) if isinstance(body, ResyncChunk) else 0)


class WorkQueue(asyncio.Queue[WorkItem]):
    """An `asyncio.Queue` of work items that is full once its records weigh `maxsize` (`weight`)."""

    _weight: int

    def __init__(self, maxsize: int = QUEUE_WEIGHT) -> None:
        super().__init__(maxsize)

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self._weight = 0

    def _put(self, item: WorkItem) -> None:
        super()._put(item)
        self._weight += weight(item)

    def _get(self) -> WorkItem:
        item = super()._get()
        self._weight -= weight(item)
        return item

    @property
    def held(self) -> int:
        """The weight of the records queued now."""
        return self._weight

    def full(self) -> bool:
        return self.maxsize > 0 and self._weight >= self.maxsize
