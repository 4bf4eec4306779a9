"""`GitTree` keeps a plain file's entry as its blob id alone and every other entry with its mode.

A branch worker holds every file of its tree as long as it runs; a (mode, id) tuple per file was
a quarter of what the tree held per file (issue 32's memory budget). The tree written back must
still be git's own: executable files, symlinks and folders keep their modes. Against a real
repository, read back with `git ls-tree`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import git

from pipeline.commit.git.objstore import ObjectStore
from pipeline.commit.git.tree import BLOB_MODE, GitTree


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=True)
    return done.stdout.decode()


def test_plain_files_are_held_as_ids_and_other_modes_survive_a_rewrite(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "live").mkdir()
    (repo / "live" / "a.yaml").write_text("a: 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("run.sh")
    _git(repo, "add", "-A")
    before = _git(repo, "write-tree").strip()

    store = ObjectStore(repo / ".git", git.Repo(repo).odb)
    tree = GitTree(store, bytes.fromhex(before))
    added = store.write(b"blob", b"b: 2\n")
    tree.put("live/b.yaml", added)
    assert tree.get("live/b.yaml") is added
    assert tree.files("") == ["link", "run.sh"]
    assert tree.folders("") == ["live"]
    root = tree.write()
    store.flush()

    live = tree._chain("live", create=False)
    assert live is not None
    entries = live[-1].entries
    assert entries is not None
    assert all(isinstance(entry, bytes) for entry in entries.values())  # ids, no tuples
    listing = _git(repo, "ls-tree", "-r", root.hex())
    modes = {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}
    assert modes == {
        "link": "120000",
        "run.sh": "100755",
        "live/a.yaml": f"{BLOB_MODE:o}",
        "live/b.yaml": "100644",
    }
    assert _git(repo, "cat-file", "-p", f"{root.hex()}:live/b.yaml") == "b: 2\n"
    assert tree.get("run.sh") is not None
    assert tree.get("live") is None  # a folder is not a file
    assert tree.delete("live/a.yaml")
    assert not tree.delete("live/a.yaml")
