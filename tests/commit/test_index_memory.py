"""A branch worker's home index keeps no copy of the branch's content (issue 32).

The planner edits files from their current content, which the index used to hold as bytes for
every YAML file of the target folder: after a first sync, one copy of every mirrored object for as
long as the worker ran (about a third of what the worker kept per object). Files whose blob is in
the branch's object store are now kept as blob ids and read back on demand. Against a real local
bare remote; the property is structural (bytes held by the index), not a timing.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

from pipeline.codec.branch_work import WorkItem, decode_work, work_record
from pipeline.commit.branch import BranchWorker
from pipeline.intent.files import FolderFiles
from pipeline.intent.homes import Home, NamespaceSource
from pipeline.log.api import Record
from tests.commit.helpers import Work, cm, files, git
from tests.commit.test_branch_worker import Harness

DATA = "x" * 4096
OBJECTS = 40


def _folder_files(worker: BranchWorker) -> FolderFiles:
    folder = worker._homes.folder("live")  # the worker's own index, read here as a test may
    assert folder is not None
    return folder.files


def _assert_reads_the_remote(held: FolderFiles, remote: Path) -> None:
    on_remote = files(remote)
    assert sorted(held) == sorted(on_remote)
    for path in held:
        assert held.blob(path) is not None, path
        assert held[path].decode() == on_remote[path]


async def test_a_committed_snapshot_leaves_only_blob_ids_in_the_index(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    work = Work()
    await h.feed(
        *work.snapshot(1, [cm(f"cm-{n:03d}", data=f"{DATA}{n}") for n in range(OBJECTS)], chunk_size=8)
    )
    await h.settle_time()
    assert len(files(h.remote)) == OBJECTS
    held = _folder_files(h.worker)
    assert held.held_bytes == 0
    _assert_reads_the_remote(held, h.remote)

    # a later change is planned from the content read back, and stored as an id once committed
    await h.feed(work.update(cm("cm-007", data="changed")))
    await h.settle_time()
    assert "changed" in git(h.remote, "show", "main:live/team-a/configmaps/cm-007.yaml")
    assert held.held_bytes == 0
    _assert_reads_the_remote(held, h.remote)


async def test_a_worker_that_starts_on_a_large_branch_reads_it_without_holding_it(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    work = Work()
    await h.feed(*work.snapshot(1, [cm(f"cm-{n:03d}", data=f"{DATA}{n}") for n in range(OBJECTS)]))
    await h.settle_time()

    h.tmp_path = tmp_path / "restarted"
    h.worker = h.new_worker()
    await h.worker.sync()
    held = _folder_files(h.worker)
    assert held.held_bytes == 0
    _assert_reads_the_remote(held, h.remote)

    await h.feed(work.delete("cm-003"), work.update(cm("cm-004", data="again")))
    await h.settle_time()
    on_remote = files(h.remote)
    assert "live/team-a/configmaps/cm-003.yaml" not in on_remote
    assert "again" in on_remote["live/team-a/configmaps/cm-004.yaml"]
    assert held.held_bytes == 0
    _assert_reads_the_remote(held, h.remote)


def _as_read(items: list[WorkItem]) -> list[WorkItem]:
    """`items` as the commit consumer hands them over: encoded and decoded again, so every string
    of each object is a fresh copy, as a record read from the log gives it."""
    read = []
    for item in items:
        pending = work_record(item)
        record = Record("work", item.partition, item.offset, 0, pending.key, pending.value, pending.headers)
        read.append(decode_work(record))
    return read


async def test_what_the_worker_keeps_per_object_is_shared_not_copied(tmp_path: Path) -> None:
    """After a first sync the worker keeps, per object, one key shared by the file's parse and its
    home, the home as its path (no `Home`, list or tuple), a count per kind (not a kinds entry per
    name), the tree's own blob id in the index, a state-book entry with no tuple of its own, and
    one string per name and per namespace: the state book's key holds the index key's name and
    the one shared namespace, though each record read brings its own copies. Each of these was a
    separate object per object before (issue 32's memory budget; what is kept per object is
    structural, not timed)."""
    h = Harness(tmp_path)

    async def no_state(_targets: frozenset[str]) -> list[Any]:
        return []

    h.worker = h.new_worker(load_state=no_state, on_state=lambda _states: None)
    work = Work()
    await h.feed(
        *_as_read(
            work.snapshot(1, [cm(f"cm-{n:03d}", data=f"{DATA}{n}") for n in range(OBJECTS)], chunk_size=8)
        )
    )
    await h.settle_time()
    assert len(files(h.remote)) == OBJECTS
    folder = h.worker._homes.folder("live")
    assert folder is not None
    index = folder.index
    book = h.worker._decide.book
    assert book is not None

    def assert_shared() -> None:
        book_keys = {(k.namespace, k.name): k for k, e in book._entries.items() if not e.removed}
        assert len(book_keys) == len(index.homes)
        for key, home in index.homes.items():
            assert type(home) is str  # one plain home is held as its path
            assert folder._parsed[home] is key  # the file's parse is the home's own key
            assert folder.files.blob(home) is h.worker._tree.get(home)  # one blob id, the tree's
            held = book_keys[(key.namespace, key.name)]
            assert held.name is key.name  # one name string for the index and the book
            assert held.namespace is key.namespace is sys.intern("team-a")
            assert index.candidates(key) == (Home(home, 0, NamespaceSource.DOCUMENT),)

    assert len(index.homes) == OBJECTS
    assert_shared()
    assert index.group_kinds == {"": {"ConfigMap": OBJECTS}}  # no entry per object name
    assert not hasattr(folder, "_keys")
    entries = list(book._entries.values())
    assert len(entries) == OBJECTS
    assert not any(isinstance(ref, tuple) for entry in entries for ref in gc.get_referents(entry))

    # a later change and a delete keep the shapes, and the index stays exact
    await h.feed(*_as_read([work.update(cm("cm-007", data="changed")), work.delete("cm-003")]))
    await h.settle_time()
    assert len(index.homes) == OBJECTS - 1
    assert index.group_kinds == {"": {"ConfigMap": OBJECTS - 1}}
    assert_shared()
    _assert_reads_the_remote(folder.files, h.remote)
