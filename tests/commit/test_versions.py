"""Never go backwards: the pure ledger, and the branch worker on a real bare remote.

An object's older version can follow its newer one on branch-work after a watch failover (the new
leader resumes from a lagging cursor, or a paused old leader appends after its successor); the
worker must skip it, count it, and settle its offset.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.codec.branch_work import Removal, ResyncEnd
from pipeline.commit.consumer import CommitWorker
from pipeline.commit.versions import VersionLedger
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log.api import Log
from pipeline.models import compare_versions
from tests.commit.helpers import BOB, Work, bare_remote, cm, files, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.commit.test_branch_worker import Harness

PATH = "live/team-a/configmaps/a.yaml"


def older_skipped() -> float:
    return REGISTRY.get_sample_value("reverser_commit_skipped_total", {"reason": "older_version"}) or 0.0


def test_versions_compare_as_integers_only_when_both_are_decimal() -> None:
    assert compare_versions("9", "10") == -1  # not string order
    assert compare_versions("10", "10") == 0
    assert compare_versions("11", "10") == 1
    assert compare_versions("abc", "10") is None
    assert compare_versions("", "10") is None
    assert compare_versions("١٢", "10") is None  # non-ASCII digits are not etcd revisions


def test_ledger_skips_older_versions_and_remembers_deletes() -> None:
    ledger = VersionLedger()
    assert not ledger.is_older("p", "5")
    ledger.applied("p", "12")
    assert ledger.is_older("p", "10")
    assert not ledger.is_older("p", "12")
    assert not ledger.is_older("p", "13")
    assert not ledger.is_older("p", "opaque")  # incomparable: written, as before
    ledger.applied("p", "10")  # an older version never lowers the mark
    assert ledger.is_older("p", "11")
    ledger.applied("q", "20")  # e.g. a delete at 20
    assert ledger.newer_than("15") == {"q"}
    assert ledger.newer_than("25") == set()


async def test_an_older_version_after_a_newer_one_is_skipped_and_counted(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Work()
    before = older_skipped()
    await h.feed(
        w.create(cm("a", key="v1"), rv="10"),
        w.update(cm("a", key="v2"), rv="12"),
        w.update(cm("a", key="v1"), BOB, rv="10"),  # the old leader's version, redelivered late
    )
    await h.settle_time(5)
    assert "key: v2" in files(h.remote)[PATH]
    assert older_skipped() == before + 1
    assert sorted(h.settled) == [(0, 0), (0, 1), (0, 2)], "the skipped record settles too"
    assert [line.split("|")[0] for line in log_lines(h.remote, fmt="%an|%s")] == ["Alice Example"]

    # a delete is a version too: an older update must not bring the object back
    await h.feed(w.delete("a", rv="15"), w.update(cm("a", key="v2"), rv="12"))
    await h.settle_time(5)
    assert PATH not in files(h.remote)
    assert older_skipped() == before + 2
    # a newer version after all of it is written
    await h.feed(w.create(cm("a", key="v3"), rv="20"))
    await h.settle_time(5)
    assert "key: v3" in files(h.remote)[PATH]


async def test_a_snapshot_listed_earlier_neither_reverts_nor_sweeps_newer_writes(tmp_path: Path) -> None:
    h = Harness(tmp_path, prune="Always")
    w = Work()
    before = older_skipped()
    await h.feed(
        w.create(cm("a", key="v2"), rv="12"),
        w.create(cm("b"), rv="13"),
    )
    await h.settle_time(5)
    # listed at revision 11, before b existed and while a was still at v1
    await h.feed(*w.snapshot(1, [cm("a", key="v1"), cm("c")], rv="11", object_rvs={"a": "10", "c": "9"}))
    await h.settle_time(5)
    tree = files(h.remote)
    assert "key: v2" in tree[PATH]
    assert "live/team-a/configmaps/b.yaml" in tree, "created after the list: not an orphan"
    assert "live/team-a/configmaps/c.yaml" in tree
    assert older_skipped() == before + 1
    assert sorted(h.settled) == [(0, i) for i in range(w.offset)]


async def test_a_new_owner_remembers_the_versions_its_predecessor_pushed(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """Failover of the commit worker between a newer version and a late older one."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = settings.model_copy(
        update={
            "providers": [
                ProviderSettings(name="git", url=str(remote), commit_window_s=0.2, push_cooldown_s=0.2)
            ],
            "targets": [TargetSettings(name="t1", provider="git", path="live")],
        }
    )
    w = Work(step_ms=10)
    await append_work(
        any_log, cfg, [w.create(cm("a", key="v1"), rv="10"), w.update(cm("a", key="v2"), rv="12")]
    )
    first = CommitWorker(cfg, any_log)
    await first.start()
    try:
        await wait_settled(any_log, cfg)
    finally:
        await first.stop()
    assert "key: v2" in files(remote)[PATH]

    before = older_skipped()
    await append_work(any_log, cfg, [w.update(cm("a", key="v1"), BOB, rv="10")])  # a zombie's late write
    second = CommitWorker(cfg.model_copy(update={"workdir": tmp_path / "second"}), any_log)
    await second.start()
    try:
        await wait_settled(any_log, cfg)
    finally:
        await second.stop()
    assert "key: v2" in files(remote)[PATH]
    assert older_skipped() == before + 1
    assert len(log_lines(remote)) == 1


async def test_a_delete_older_than_the_snapshot_after_it_still_removes_the_file(tmp_path: Path) -> None:
    """The LIST fallback writes removals buffered during its LIST after the snapshot (chaos seed 3).

    Under `OnEvent` the snapshot's absence already deletes the file the pipeline wrote, authored by
    the deleter its evidence names; the late delete is then older than that and skipped, and so is
    a stale delete of an object recreated under the same name before the list.
    """
    h = Harness(tmp_path)
    w = Work()
    await h.feed(w.create(cm("a"), rv="10"), w.create(cm("c", key="v1"), rv="11"))
    await h.settle_time(5)
    before = older_skipped()
    # listed at 20: a deleted at 15; c deleted at 16 and created again at 18
    items = w.snapshot(1, [cm("c", key="v2")], rv="20", object_rvs={"c": "18"})
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    evidence = (Removal("uid-a", "team-a", "a", BOB),)
    items[-1] = replace(end, body=replace(end.body, removals=evidence))
    await h.feed(*items)
    await h.feed(w.delete("a", BOB, rv="15"), w.delete("c", BOB, rv="16"))
    await h.settle_time(5)
    tree = files(h.remote)
    assert PATH not in tree
    assert "key: v2" in tree["live/team-a/configmaps/c.yaml"]
    assert older_skipped() == before + 2
    assert log_lines(h.remote, fmt="%an|%s")[1:] == [
        "Bob|[DELETE] v1/configmaps/a",
        "Reverser Pipeline|reconciled 1 configmaps (last resourceVersion: 20)",  # c at v2
    ]
    assert sorted(h.settled) == [(0, i) for i in range(w.offset)]


def test_a_uuid_is_held_as_its_16_bytes_and_any_uid_reads_back_as_given() -> None:
    # the ledger holds a uid per path for as long as the worker runs (issue 32's memory budget)
    ledger = VersionLedger()
    kube_uid = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
    for path, uid in [("a.yaml", kube_uid), ("b.yaml", "uid-b"), ("c.yaml", kube_uid.upper())]:
        ledger.applied(path, "1", uid)
        assert ledger.uid_of(path) == uid
    assert ledger._uids["a.yaml"] == bytes.fromhex(kube_uid.replace("-", ""))
    assert ledger._uids["c.yaml"] == kube_uid.upper()  # would not read back as given: kept as is
    assert ledger.uid_of("missing.yaml") == ""
