"""Pure pieces of the commit worker: identities, paths, trailers, the offset book, the tree editor."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from gitdb.pack import PackIndexFile

from pipeline.commit.commits import CommitInfo
from pipeline.commit.git.objstore import pack_index
from pipeline.commit.git.repo import LocalRepo, Signature
from pipeline.commit.identity import UNRESOLVED, Identity, author_identity, author_kind, safe_email
from pipeline.commit.layout import LayoutError, canonical_path, in_scope, normalize_target_path
from pipeline.commit.messages import parse_offset, trusted_offset
from pipeline.commit.offsets import OffsetBook
from pipeline.log.api import TopicPartition
from pipeline.redaction import redact_url
from tests.commit.helpers import bare_remote, git

OPERATOR = Identity("Op", "op@example.com")
AT_ZERO = Signature(OPERATOR, 0)


def test_resolved_author_rendering() -> None:
    assert author_identity("RESOLVED", "alice", "Alice A", "alice@corp.io", OPERATOR) == Identity(
        "Alice A", "alice@corp.io"
    )
    assert author_identity("RESOLVED", "alice", "Evil <x>", "bad", OPERATOR) == Identity(
        "alice", "alice@noreply.cluster.local"
    )
    assert author_identity("RESOLVED", "bob@corp.io", " ", "", OPERATOR) == Identity(
        "bob@corp.io", "bob@corp.io"
    )
    assert author_identity("RESOLVED", "x", "new\nline", "", OPERATOR).name == "x"


def test_unresolved_is_never_the_committer() -> None:
    assert author_identity("UNRESOLVED", "", "", "", OPERATOR) == UNRESOLVED
    assert author_identity("RESOLVED", "", "", "", OPERATOR) == UNRESOLVED
    assert author_identity("NOT_ATTEMPTED", "", "", "", OPERATOR) == OPERATOR


def test_safe_email_and_kinds() -> None:
    assert (
        safe_email("system:serviceaccount:flux-system:kustomize-controller")
        == "systemserviceaccountflux-systemkustomize-controller@noreply.cluster.local"
    )
    assert safe_email("::") == "unknown-user@noreply.cluster.local"
    assert author_kind("RESOLVED", "system:serviceaccount:a:b") == "serviceaccount"
    assert author_kind("RESOLVED", "system:admin") == "user"
    assert author_kind("UNRESOLVED", "") == "unresolved"
    assert author_kind("NOT_ATTEMPTED", "") == "committer"


def test_canonical_paths() -> None:
    assert canonical_path("live", "", "configmaps", "team-a", "app") == "live/team-a/configmaps/app.yaml"
    assert canonical_path("", "apps", "deployments", "team-a", "api") == "team-a/apps/deployments/api.yaml"
    assert canonical_path("", "", "namespaces", "", "team-a") == "_cluster/namespaces/team-a.yaml"
    assert (
        canonical_path("x", "rbac.authorization.k8s.io", "clusterroles", "", "admin")
        == "x/_cluster/rbac.authorization.k8s.io/clusterroles/admin.yaml"
    )
    assert canonical_path("", "", "secrets", "ns", "db") == "ns/secrets/db.sops.yaml"
    with pytest.raises(LayoutError):
        canonical_path("", "", "configmaps", "ns", "../evil")


@pytest.mark.parametrize(("raw", "clean"), [(".", ""), ("", ""), ("live/", "live"), ("a//b/./c", "a/b/c")])
def test_target_paths(raw: str, clean: str) -> None:
    assert normalize_target_path(raw) == clean


@pytest.mark.parametrize("raw", ["/abs", "../up", "a/../../b", "a\\b"])
def test_target_paths_refused(raw: str) -> None:
    with pytest.raises(LayoutError):
        normalize_target_path(raw)


def test_scope_membership() -> None:
    assert in_scope("live/team-a/configmaps/x.yaml", "live", "", "configmaps", "team-a")
    assert not in_scope("live/team-b/configmaps/x.yaml", "live", "", "configmaps", "team-a")
    assert in_scope("live/team-b/configmaps/x.yaml", "live", "", "configmaps", "")
    assert not in_scope("live/team-a/apps/configmaps/x.yaml", "live", "", "configmaps", "")
    assert not in_scope("live/team-a/configmaps/README.md", "live", "", "configmaps", "team-a")


def test_offset_trailer_belongs_to_its_fifo() -> None:
    info = CommitInfo(
        "0" * 40, b"", (), "a", "s\n\nbody\n\nReverser-Branch: git main\nReverser-Offset: 3:17\n"
    )
    assert parse_offset(info.trailers(), "git", "main") == (3, 17)
    assert parse_offset(info.trailers(), "git", "other") is None
    human = CommitInfo("0" * 40, b"", (), "a", "fix typo\n")
    assert parse_offset(human.trailers(), "git", "main") is None


def test_offset_book_commits_before_oldest_unsettled() -> None:
    tp = TopicPartition("t", 0)
    book = OffsetBook()
    for offset in range(5):
        book.received(tp, offset)
    book.settle(tp, 1)
    book.settle(tp, 3)
    assert book.committable(tp) == 0
    book.settle(tp, 0)
    assert book.due({tp}) == {tp: 2}
    book.mark_committed({tp: 2})
    assert book.due({tp}) == {}
    book.settle(tp, 2)
    book.settle(tp, 4)
    assert book.due({tp}) == {tp: 5}


def test_offset_book_commits_a_marker_seen_after_the_last_settle() -> None:
    """All records settled and committed; a later fetch moves the position past a transaction
    marker: the partition is due again, with no new record, else the group lags by 1 for good."""
    tp = TopicPartition("t", 0)
    position = {tp: 3}

    def moved_on(offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {p: max(o, position[p]) if o == 3 else o for p, o in offsets.items()}

    book = OffsetBook()
    for offset in range(3):
        book.received(tp, offset)
        book.settle(tp, offset)
    assert book.due({tp}, moved_on) == {tp: 3}
    book.mark_committed({tp: 3})
    assert book.due({tp}, moved_on) == {}
    position[tp] = 4  # the fetch after the commit consumed the marker at offset 3
    assert book.due({tp}, moved_on) == {tp: 4}
    book.mark_committed({tp: 4})
    assert book.due({tp}, moved_on) == {}
    book.received(tp, 4)  # an unsettled record holds the partition at its offset, marker or not
    assert book.due({tp}, moved_on) == {}


def test_offset_book_commits_a_quiet_partition_past_its_markers() -> None:
    """A partition that gave this worker no record is due at the member's quiet position (a marker
    its previous owner stopped short of), once; a received record takes over from the position."""
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    book = OffsetBook()
    assert book.due({tp}, None, {tp: 7, other: 3}) == {tp: 7}
    book.mark_committed({tp: 7})
    assert book.due({tp}, None, {tp: 7}) == {}
    assert book.due({tp}, None, {tp: 8}) == {tp: 8}
    book.mark_committed({tp: 8})
    book.received(tp, 9)  # an unsettled record holds the partition, whatever the member read past
    assert book.due({tp}, None, {tp: 12}) == {tp: 9}
    book.mark_committed({tp: 9})
    assert book.due({tp}, None, {tp: 12}) == {}
    book.settle(tp, 9)
    assert book.due({tp}, None, {tp: 12}) == {tp: 10}


def test_redact_url() -> None:
    assert redact_url("https://user:pw@git.example.com:8443/r.git") == "https://git.example.com:8443/r.git"
    assert redact_url("/srv/repo.git") == "/srv/repo.git"


def test_tree_editor_matches_git(tmp_path: Path) -> None:
    """Trees written without the index read back identically through git itself."""
    repo = LocalRepo(tmp_path / "r", str(tmp_path / "none"))
    tree = repo.tree(None)
    for path in ("a/b/one.yaml", "a/b/two.yaml", "a/c.yaml", "z.yaml", "a-b/x.yaml", "a.b"):
        tree.put(path, repo.store_blob(path.encode()))
    assert tree.delete("a/b/one.yaml")
    assert not tree.delete("a/b/missing.yaml")
    assert tree.get("a/c.yaml") is not None
    with pytest.raises(IsADirectoryError):
        tree.put("a/b", repo.store_blob(b"x"))
    sha = repo.commit(tree.write(), None, AT_ZERO, AT_ZERO, "m\n")
    repo.set_branch("main", sha)
    listing = subprocess.run(
        ["git", "-C", str(tmp_path / "r"), "ls-tree", "-r", "--name-only", "main"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert listing == ["a-b/x.yaml", "a.b", "a/b/two.yaml", "a/c.yaml", "z.yaml"]
    subprocess.run(["git", "-C", str(tmp_path / "r"), "fsck", "--strict"], check=True, capture_output=True)
    again = repo.tree(sha)
    assert again.delete("a/b/two.yaml")
    emptied = repo.commit(again.write(), sha, AT_ZERO, AT_ZERO, "m\n")
    repo.set_branch("main", emptied)
    listing = subprocess.run(
        ["git", "-C", str(tmp_path / "r"), "ls-tree", "-r", "-t", "--name-only", "main"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert "a/b" not in listing, "an emptied folder disappears"


def test_packs_and_their_index_are_what_git_writes(tmp_path: Path) -> None:
    """The pack index is written here, not by `git index-pack`: git must accept both files as its own."""
    repo = LocalRepo(tmp_path / "r", str(tmp_path / "none"))
    tree = repo.tree(None)
    contents = {f"d{n % 7}/f{n}.yaml": b"x: %d\n" % n * (n % 50 + 1) for n in range(600)}
    contents["big.bin"] = bytes(range(256)) * 400
    for path, content in contents.items():
        tree.put(path, repo.store_blob(content))
    repo.set_branch("main", repo.commit(tree.write(), None, AT_ZERO, AT_ZERO, "m\n"))
    git_dir = tmp_path / "r"
    (idx,) = (git_dir / "objects" / "pack").glob("*.idx")
    verified = subprocess.run(
        ["git", "-C", str(git_dir), "verify-pack", "-v", str(idx)], check=True, capture_output=True, text=True
    ).stdout
    # blobs, 7 folders, the root tree, the commit
    assert f"non delta: {len(contents) + 7 + 1 + 1} objects" in verified
    subprocess.run(["git", "-C", str(git_dir), "fsck", "--strict", "--full"], check=True, capture_output=True)
    for path in ("d3/f10.yaml", "big.bin"):
        shown = subprocess.run(
            ["git", "-C", str(git_dir), "show", f"main:{path}"], check=True, capture_output=True
        ).stdout
        assert shown == contents[path]
    assert idx.stem == f"pack-{PackIndexFile(str(idx)).packfile_checksum().hex()}"


def test_pack_index_offsets_past_2_gib_use_the_64_bit_table(tmp_path: Path) -> None:
    entries = [(bytes([n]) * 20, n, offset) for n, offset in enumerate([12, 0x8000_0000, 0x1_2345_6789, 99])]
    idx = tmp_path / "pack-x.idx"
    idx.write_bytes(pack_index(list(entries), b"\x01" * 20))
    read = PackIndexFile(str(idx))
    assert read.version() == 2
    assert read.size() == 4
    assert [read.offset(read.sha_to_index(sha)) for sha, _crc, _offset in entries] == [
        12,
        0x8000_0000,
        0x1_2345_6789,
        99,
    ]
    assert [read.crc(read.sha_to_index(sha)) for sha, _crc, _offset in entries] == [0, 1, 2, 3]
    assert read.packfile_checksum() == b"\x01" * 20
    assert read.indexfile_checksum() == hashlib.sha1(idx.read_bytes()[:-20]).digest()


def test_packs_are_consolidated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pack per push would grow without bound; `git gc --auto` folds them together."""
    from pipeline.commit.git import repo as gitrepo

    monkeypatch.setattr(gitrepo, "GC_EVERY_PACKS", 5)
    repo = LocalRepo(tmp_path / "r", str(tmp_path / "none"))
    subprocess.run(["git", "-C", str(tmp_path / "r"), "config", "gc.autoPackLimit", "3"], check=True)
    parent = None
    for n in range(10):
        tree = repo.tree(parent)
        tree.put(f"f{n}.yaml", repo.store_blob(str(n).encode()))
        parent = repo.commit(tree.write(), parent, AT_ZERO, AT_ZERO, f"{n}\n")
        repo.set_branch("main", parent)
    packs = list((tmp_path / "r" / "objects" / "pack").glob("*.pack"))
    assert len(packs) < 10
    subprocess.run(["git", "-C", str(tmp_path / "r"), "fsck", "--strict"], check=True, capture_output=True)
    assert repo.read_commit(parent).message == "9\n"


def test_trusted_offset_takes_the_last_claim_and_says_why_it_refuses_one() -> None:
    own = "Reverser Pipeline <noreply@reverser.invalid>"
    claims = {"Reverser-Offset": ["1:5", "2:9"], "Reverser-Branch": ["git main"]}
    assert parse_offset(claims, "git", "main") == (2, 9), "the last claim counts"
    assert trusted_offset(claims, own, own, "git", "main", {2: 10}) == ((2, 9), None)
    assert trusted_offset(claims, own, own, "git", "main", None) == ((2, 9), None)
    assert trusted_offset(claims, own, own, "git", "main", {2: 9}) == (
        None,
        "beyond the end of branch-work partition 2 (9)",
    ), "an offset at the log end was never written"
    assert trusted_offset(claims, own, own, "git", "main", {1: 50}) == (
        None,
        "beyond the end of branch-work partition 2 (None)",
    )
    assert trusted_offset({"Reverser-Offset": ["2:9"]}, own, own, "git", "main", None) == (
        None,
        "Reverser-Offset without Reverser-Branch",
    )
    assert trusted_offset(claims, "mallory <m@x>", own, "git", "main", None) == (
        None,
        "committed by 'mallory <m@x>', not by the worker",
    )
    assert trusted_offset(claims, own, own, "git", "other", None) == (None, None)


class Killed(BaseException):
    """Stands in for SIGKILL inside one call: nothing after the raise runs, no cleanup handler."""


async def test_a_ref_write_cut_short_by_a_kill_leaves_a_fetchable_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed while moving its branch must not break the next fetch (soak run 2 of 10 did).

    The killed process left an empty `refs/heads/main.tmp`, which git reads as a branch pointing
    nowhere and answers every fetch with "bad object", so the restarted worker never caught up.
    """
    remote = bare_remote(tmp_path / "remote.git")
    path = tmp_path / "r"
    repo = LocalRepo(path, str(remote))
    tree = repo.tree(None)
    tree.put("a.yaml", repo.store_blob(b"a: 1\n"))
    first = repo.commit(tree.write(), None, AT_ZERO, AT_ZERO, "one\n")
    repo.set_branch("main", first)
    repo.set_branch("release.tmp", first)
    await repo.push("main", first, None)

    real_replace = os.replace

    def killed_at_the_ref(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(src).endswith(".lock"):
            raise Killed
        real_replace(src, dst)

    second = repo.commit(tree.write(), first, Signature(OPERATOR, 1), Signature(OPERATOR, 1), "two\n")
    with monkeypatch.context() as patched:
        patched.setattr("pipeline.commit.git.repo.os.replace", killed_at_the_ref)
        with pytest.raises(Killed):
            repo.set_branch("main", second)
    assert (path / "refs" / "heads" / "main.lock").exists()
    await repo.fetch()  # git never reads a lock file as a ref
    assert git(path, "rev-parse", "main").strip() == first

    # What the earlier ref writer and a killed `git fetch` leave behind.
    (path / "refs" / "heads" / "main.tmp").write_text("")
    (path / "refs" / "remotes" / "origin" / "main.lock").write_text(first + "\n")
    (path / "packed-refs.lock").write_text("")
    with pytest.raises(subprocess.CalledProcessError):
        git(path, "fetch", "--quiet", str(remote), "+refs/heads/*:refs/remotes/origin/*")
    repo.close()

    reopened = LocalRepo(path, str(remote))
    await reopened.fetch()
    assert reopened.remote_ref("main") == first
    assert sorted(p.name for p in (path / "refs" / "heads").iterdir()) == ["main", "release.tmp"]
    assert not (path / "refs" / "remotes" / "origin" / "main.lock").exists()
    assert not (path / "packed-refs.lock").exists()
    reopened.set_branch("main", second)
    assert git(path, "rev-parse", "main").strip() == second


def _deltas_on(remote: Path) -> int:
    """How many objects the remote's packs store as deltas (`git verify-pack -v`'s chain lines)."""
    count = 0
    for index in (remote / "objects" / "pack").glob("*.idx"):
        listing = git(remote, "verify-pack", "-v", str(index))
        count += sum(1 for line in listing.splitlines() if len(line.split()) == 7)
    return count


@pytest.mark.parametrize("bulk", [True, False])
async def test_a_bulk_push_sends_its_objects_without_a_delta_search(tmp_path: Path, bulk: bool) -> None:
    """A snapshot part's push skips git's delta search (issue 32: 0.7 of a 0.85 s push of 5,000
    files, for no smaller pack); a change's push keeps it, so a folder's large tree goes as a
    delta of the remote's. Told apart by what lands on the remote, which keeps every pack it is
    sent (`receive.unpackLimit`)."""
    remote = bare_remote(tmp_path / "remote.git")
    git(remote, "config", "receive.unpackLimit", "1")
    repo = LocalRepo(tmp_path / "r", str(remote))
    tree = repo.tree(None)
    for n in range(300):
        tree.put(f"live/cm-{n:04d}.yaml", repo.store_blob(f"index: {n}\n".encode()))
    first = repo.commit(tree.write(), None, AT_ZERO, AT_ZERO, "many files\n")
    repo.set_branch("main", first)
    await repo.push("main", first, None, bulk=True)
    before = _deltas_on(remote)
    tree.put("live/cm-0007.yaml", repo.store_blob(b"index: changed\n"))
    second = repo.commit(tree.write(), first, AT_ZERO, AT_ZERO, "one file\n")
    repo.set_branch("main", second)
    await repo.push("main", second, first, bulk=bulk)
    assert git(remote, "rev-parse", "main").strip() == second
    git(remote, "fsck", "--strict")
    sent_as_deltas = _deltas_on(remote) - before
    assert (sent_as_deltas == 0) if bulk else (sent_as_deltas > 0), sent_as_deltas
    repo.close()
