"""The home index a branch worker builds leaves the garbage collector's walks (issue 32).

A full collection walks every tracked container; after a large first sync most of them are the
home index, which lives as long as the branch. A worker's sync builds it inside
`gcpolicy.long_lived`, so a full collection that runs while it builds freezes it. The collection
is run by the test from the worker's own `load_state` port, which the sync calls once the index
is complete (where the collector could have run on its own); no clock is involved. Against a
real local bare remote.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from pipeline.codec.object_state import ObjectState
from pipeline.intent.homes import ObjectKey, build_index
from tests.commit.helpers import Work, cm, files
from tests.commit.test_branch_worker import Harness


def _frozen(obj: object) -> bool:
    return gc.is_tracked(obj) and not any(o is obj for g in range(3) for o in gc.get_objects(g))


def _held_key(homes: Iterable[ObjectKey], key: ObjectKey) -> ObjectKey:
    """The index's own key equal to `key` (a home is held as its path, a string the collector does
    not track, so the key tells whether the entry was frozen)."""
    return next(held for held in homes if held == key)


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_a_full_collection_during_a_sync_freezes_the_home_index_and_only_then(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.feed(*Work().snapshot(1, [cm(f"cm-{n}") for n in range(3)], chunk_size=2))
    await h.settle_time()
    assert len(files(h.remote)) == 3

    async def collect_then_no_state(_targets: frozenset[str]) -> list[ObjectState]:
        gc.collect()
        return []

    worker = h.new_worker("clones-restarted", load_state=collect_then_no_state, on_state=lambda _states: None)
    await worker.sync()

    # the worker's own index, read here as a test may
    folder = worker._homes.folder("live")
    assert folder is not None
    assert _frozen(_held_key(folder.index.homes, ObjectKey("", "ConfigMap", "team-a", "cm-1")))
    # the sync is over: a later full collection leaves what is built since in the generations
    later = ["built after the sync"]
    gc.collect()
    assert not _frozen(later)


async def test_a_full_collection_during_a_snapshot_part_freezes_what_the_part_indexed(tmp_path: Path) -> None:
    """A snapshot committed in parts indexes each part's objects as their commit is made; the
    index entries live as long as the branch, so a collection while a part is committed and pushed
    (here at the worker's `pushed` hook) freezes them, as at a snapshot's end. Left in the
    collector's walks, every full collection of a 100,000-object first sync walked every part
    before it: a 5.8 s loop stall in `make bench scale`."""
    h = Harness(tmp_path, part_objects=1)

    async def collect_when_pushed(point: str) -> None:
        if point == "pushed":
            gc.collect()

    h.worker = h.new_worker(hook=collect_when_pushed)
    begin, first, *_rest = Work().snapshot(1, [cm(f"cm-{n}") for n in range(3)], chunk_size=1)
    await h.feed(begin, first)
    assert sorted(files(h.remote)) == ["live/team-a/configmaps/cm-0.yaml"], "the first part is pushed"
    folder = h.worker._homes.folder("live")  # the worker's own index, read here as a test may
    assert folder is not None
    assert _frozen(_held_key(folder.index.homes, ObjectKey("", "ConfigMap", "team-a", "cm-0")))
    later = ["built after the part"]
    gc.collect()
    assert not _frozen(later)


async def test_the_index_the_worker_keeps_from_its_own_writes_is_the_one_its_tree_gives(
    tmp_path: Path,
) -> None:
    """The worker indexes the canonical files it writes from the objects in hand instead of
    parsing them back (issue 32); after a first sync, live changes and a delete, that index must
    be the one a fresh read of the pushed tree builds."""
    h = Harness(tmp_path, part_objects=2)
    work = Work()
    await h.feed(*work.snapshot(1, [cm(f"cm-{n}", x=str(n)) for n in range(5)], chunk_size=2))
    await h.feed(work.update(cm("cm-1", x="changed")), work.create(cm("cm-9", "team-b")), work.delete("cm-3"))
    await h.settle_time()
    pushed = files(h.remote)
    assert "live/team-a/configmaps/cm-3.yaml" not in pushed
    assert "live/team-b/configmaps/cm-9.yaml" in pushed
    folder = h.worker._homes.folder("live")  # the worker's own index, read here as a test may
    assert folder is not None
    built = build_index({path: text.encode() for path, text in pushed.items()}, "live")
    assert folder.index.homes == built.homes
    assert folder.index.group_kinds == built.group_kinds
