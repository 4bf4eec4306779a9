"""The home index of each target folder on a branch, built from its tree and kept current.

Before it writes an object, the commit worker asks where the object already lives in its target's
folder (`pipeline.intent.homes`). Reading and parsing every YAML file of the folder for each change
would cost a second per change in a 5,000-file repository, so the index is built once, when the
branch is based on a tip (a sync or a rebase onto a moved remote), and then updated with the files
that changed: after a rebase the two root trees are compared (subtrees with the same id are not even
read) and only the files that differ are read and parsed again; after the worker's own commit the
files it wrote are parsed from the content in hand. Its in-place placements update the index as
they are planned, so the next object of the same commit sees the file as it will be. A file whose
blob is in the object store is kept as its id and read back when the planner edits it
(`pipeline.intent.files`): the indexes hold no copy of the branch's content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.commit.git.objstore import ObjectStore, object_id
from pipeline.commit.git.tree import changed_files
from pipeline.intent.homes import FolderIndex
from pipeline.slices import Steps

__all__ = ["BranchHomes"]


class BranchHomes:
    """One `FolderIndex` per target folder of the branch, all describing the tree `root`."""

    __slots__ = ("_folders", "root")

    def __init__(self) -> None:
        self._folders: dict[str, FolderIndex] = {}
        # the root tree id the indexes describe (None: the empty tree)
        self.root: bytes | None = None

    def folder(self, target_path: str) -> FolderIndex | None:
        """The index of a target folder (normalised, "" for the repository root), if it is tracked."""
        return self._folders.get(target_path)

    def refresh(self, store: ObjectStore, root: bytes | None, folders: Iterable[str]) -> Steps[None]:
        """Describe the tree `root` for exactly `folders`: a folder tracked before is updated with
        the files that differ from the previous root, a new one is read whole, a dropped one is
        forgotten. One step per file read (and per file parsed): a worker starting on a large
        branch reads every file of its folders, in slices (`pipeline.slices`)."""
        wanted = set(folders)
        for gone in set(self._folders) - wanted:
            del self._folders[gone]
        for path in sorted(wanted):
            folder = self._folders.get(path)
            if folder is None:
                folder = self._folders[path] = FolderIndex(path, store)
                blobs = {
                    changed_path: sha
                    for changed_path, sha in changed_files(store, None, root, path)
                    if sha is not None and folder.covers(changed_path)
                }
                yield from folder.load_stored(blobs)
                continue
            for changed_path, sha in changed_files(store, self.root, root, path):
                if folder.covers(changed_path):
                    yield
                    folder.update(changed_path, None if sha is None else store.read(sha), sha)
        self.root = root

    def update(self, path: str, data: bytes | None, blob: bytes | None = None) -> None:
        """`path` holds `data` now (None: deleted), in whichever folder holds it; `blob` is its id
        when the object store holds it (the folder then keeps only the id)."""
        for folder in self._folders.values():
            folder.update(path, data, blob)

    def committed(
        self,
        root: bytes,
        files: Mapping[str, bytes | None],
        rendered: Mapping[str, Mapping[str, Any]],
        blob_at: Callable[[str], bytes | None],
    ) -> Steps[None]:
        """The worker's own commit made the tree `root` by writing `files`: the indexes learn them
        from the content in hand, without comparing trees or reading blobs; a file in `rendered`
        (path to the object it is the canonical rendering of) is indexed from its object, the
        others are parsed. `blob_at` reads a file's blob id from the tree just written, so the
        index keeps the tree's own id (one object per file, not two equal ones) instead of hashing
        the content again. One step per file, so a snapshot's commit is indexed in slices
        (`pipeline.slices`)."""
        for path, data in files.items():
            yield
            blob = None if data is None else blob_at(path) or object_id(b"blob", data)
            for folder in self._folders.values():
                folder.update(path, data, blob, rendered.get(path))
        self.root = root
