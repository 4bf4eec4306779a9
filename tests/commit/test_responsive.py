"""A large first snapshot does not hold the event loop while the commit worker applies it.

Issue 32: planning, applying and indexing a 20,000-object snapshot ran as one stretch of CPU work
and held the loop for about ten seconds, so `/healthz` went unanswered. The worker now runs that
work in slices (`pipeline.slices`). With `slice_ms=0` it yields between every two steps, so a
task that counts its turns must get a turn between the objects; no wall clock is involved. Runs
against a real local bare remote.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pipeline.codec.branch_work import WorkAuthor
from pipeline.codec.object_state import ObjectState
from pipeline.log.api import PendingRecord
from tests.commit.helpers import Work, cm, files
from tests.commit.test_branch_worker import Harness

OBJECTS = 2000


async def test_a_large_first_snapshot_gives_the_loop_back_between_its_objects(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    states: list[PendingRecord] = []

    async def no_state(_targets: frozenset[str]) -> list[ObjectState]:
        return []

    worker = h.new_worker("clones-sliced", load_state=no_state, on_state=states.extend, slice_ms=0)
    await worker.sync()
    *collected, end = Work().snapshot(1, [cm(f"cm-{n:04d}") for n in range(OBJECTS)], chunk_size=500)
    for item in collected:
        await worker.handle(item)

    middle = f"live/team-a/configmaps/cm-{OBJECTS // 2:04d}.yaml"
    # per turn of the probe: whether the plan had reached the middle object yet
    turns: list[bool] = []

    async def probe() -> None:
        while True:
            turns.append(worker.versions.knows(middle))
            await asyncio.sleep(0)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    before = len(turns)
    await worker.handle(end)
    during = len(turns) - before
    task.cancel()

    # the plan, the apply and the index each yield once per object
    assert during >= 3 * OBJECTS
    # the probe ran while the plan was half way through, not only before and after it
    seen = turns[before:]
    assert seen.count(False) >= OBJECTS // 2
    assert seen.count(True) >= OBJECTS // 2
    h.clock.advance(5)
    await worker.tick()
    assert len(states) == OBJECTS
    tree = files(h.remote)
    assert sorted(tree) == [f"live/team-a/configmaps/cm-{n:04d}.yaml" for n in range(OBJECTS)]
    assert sorted(h.settled) == [(0, n) for n in range(len(collected) + 1)]


async def test_a_worker_starting_on_a_large_branch_gives_the_loop_back_while_it_reads_it(
    tmp_path: Path,
) -> None:
    """A new owner (a restart, a failover, a rebase) reads every file of its folders into the home
    index; with `slice_ms=0` it yields between every two files read and parsed."""
    h = Harness(tmp_path)
    await h.feed(*Work().snapshot(1, [cm(f"cm-{n:04d}") for n in range(OBJECTS)], chunk_size=500))
    await h.settle_time()
    assert len(files(h.remote)) == OBJECTS

    worker = h.new_worker("clones-restarted", slice_ms=0)
    middle = f"live/team-a/configmaps/cm-{OBJECTS // 2:04d}.yaml"
    # per turn of the probe: the middle file's documents as the home index has it (None: the
    # folder is not read yet); the index is the worker's own, read here as a test may
    turns: list[int | None] = []

    async def probe() -> None:
        while True:
            folder = worker._homes.folder("live")
            turns.append(None if folder is None else folder.documents(middle))
            await asyncio.sleep(0)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    await worker.sync()
    await asyncio.sleep(0)
    task.cancel()

    # the probe ran while the folder was half parsed: after the index had its files, before the
    # middle one was parsed (fetching the remote, which awaits git, does not count)
    assert turns.count(0) >= OBJECTS // 4
    assert turns[-1] == 1
    assert worker.tip == h.worker.tip


async def test_a_new_owner_keeps_the_objects_state_in_slices(tmp_path: Path) -> None:
    """After reading the branch, a new owner reads one object-state record per object and parses
    each: with `slice_ms=0` it yields between every two of them too."""
    h = Harness(tmp_path)
    objects = [cm(f"cm-{n:04d}") for n in range(OBJECTS)]
    await h.feed(*Work().snapshot(1, objects, chunk_size=500))
    await h.settle_time()
    known = [
        ObjectState(
            target="t1",
            provider="git",
            branch="main",
            path="live",
            cluster="default",
            group="",
            version="v1",
            resource="configmaps",
            namespace="team-a",
            name=obj["metadata"]["name"],
            uid="u",
            resource_version="1",
            object_json=json.dumps(obj).encode(),
            sealed=False,
            document=b"",
            author=WorkAuthor("NOT_ATTEMPTED", tier="none"),
            partition=0,
            offset=n,
            committed_at_ms=0,
        )
        for n, obj in enumerate(objects)
    ]

    async def load_state(_targets: frozenset[str]) -> list[ObjectState]:
        return known

    worker = h.new_worker(
        "clones-new-owner", load_state=load_state, on_state=lambda _states: None, slice_ms=0
    )
    last = f"live/team-a/configmaps/cm-{OBJECTS - 1:04d}.yaml"
    # turns of the probe once the home index is complete (the remote fetched, every file read):
    # what is left of the sync is the object state
    after_index = 0

    async def probe() -> None:
        nonlocal after_index
        while True:
            folder = worker._homes.folder("live")
            after_index += folder is not None and folder.documents(last) == 1
            await asyncio.sleep(0)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    await worker.sync()
    task.cancel()
    assert after_index >= OBJECTS
