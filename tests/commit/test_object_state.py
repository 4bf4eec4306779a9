"""`<prefix>.object-state` as the commit worker writes it, on both backends and a real remote.

A cold reader's first read must equal what the branch holds after creates, updates, deletes and
snapshots (and still after compaction); every version is written once, even across redelivery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import pytest

from pipeline.codec.branch_work import WorkAuthor
from pipeline.codec.object_state import ObjectKey, ObjectState, decode_state, state_record
from pipeline.commit.consumer import STATE_APPEND_RECORDS, CommitWorker, group_id_for
from pipeline.commit.statebook import StateBook
from pipeline.config import Settings
from pipeline.log.api import Log, LogUnavailableError, PendingRecord, Record, TopicPartition, TopicSpec
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.topics import topic_specs
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, files
from tests.commit.logwork import append_work, commit_all, wait_settled
from tests.commit.objstate import as_files, first_read, raw_keys, state_topic
from tests.commit.test_commit_worker import with_git
from tests.conformance.test_log_conformance import eventually, read_all


def _state(name: str, rv: str, offset: int) -> ObjectState:
    return ObjectState(
        "t1",
        "git",
        "main",
        "live",
        "default",
        "",
        "v1",
        "configmaps",
        "ns",
        name,
        "u",
        rv,
        b"{}",
        False,
        b"{}\n",
        WorkAuthor("RESOLVED", "alice"),
        0,
        offset,
        1,
    )


def test_state_book_writes_each_version_once_and_never_backwards() -> None:
    book = StateBook([_state("a", "5", 10)])
    assert book.upsert(_state("a", "5", 12)) is None, "same version already on the topic"
    assert book.upsert(_state("a", "4", 9)) is None, "older work than the topic's record"
    newer = book.upsert(_state("a", "6", 13))
    assert newer is not None
    assert newer.key == b"t1//configmaps/ns/a"
    assert book.upsert(_state("a", "6", 13)) is None, "a redelivery writes nothing"
    key = ObjectKey("t1", "", "configmaps", "ns", "a")
    assert book.remove(key, (0, 12)) is None, "a tombstone older than the newest version"
    tombstone = book.remove(key, (0, 14))
    assert tombstone is not None
    assert tombstone.value is None
    assert book.remove(key, (0, 15)) is None, "already removed"
    assert book.upsert(_state("a", "6", 13)) is None, "no resurrection by redelivered older work"
    assert book.upsert(_state("a", "7", 16)) is not None, "re-created later"
    assert book.remove(ObjectKey("t1", "", "configmaps", "ns", "never"), (0, 20)) is None
    assert len(book) == 1
    assert list(book.live_keys("t1", "", "configmaps", None)) == [key]
    assert list(book.live_keys("t1", "", "configmaps", "other")) == []


def test_keys_survive_slashes_in_target_names_and_values_decode_back() -> None:
    state = _state("a", "1", 1)
    odd = ObjectState(**{**{f: getattr(state, f) for f in state.__slots__}, "target": "team/x"})  # type: ignore[attr-defined]
    record = state_record(odd)
    assert ObjectKey.decode(record.key) == odd.key
    got = decode_state(Record("t", 0, 0, 0, record.key, record.value, record.headers))
    assert got == odd


@pytest.mark.parametrize(
    "parts",
    [
        ("t1", "", "configmaps", "ns", "a"),
        ("t1", "apps", "deployments", "", "web-1.x_y~z"),
        ("team/x", "", "configmaps", "ns", "a"),
        ("t1", "", "configmaps", "ns", "a b"),
        ("t1", "g", "r", "n%2F", "ü"),
        ("", "", "", "", ""),
    ],
)
def test_key_encoding_quotes_exactly_the_parts_that_need_it(parts: tuple[str, str, str, str, str]) -> None:
    key = ObjectKey(*parts)
    assert key.encode() == "/".join(quote(p, safe="") for p in parts).encode()
    assert ObjectKey.decode(key.encode()) == key


async def _live(any_log: Log, cfg: Settings) -> None:
    w = Work(step_ms=10)
    items = [
        *w.snapshot(1, [cm("a"), cm("b"), cm("s")], rv="7"),
        w.create(cm("c"), rv="8"),
        w.create(cm("d"), BOB, rv="9"),
        w.update(cm("a", key="changed"), BOB, rv="10"),
        w.delete("b", BOB, rv="10"),
        w.update(cm("c", key="again"), rv="11"),
        w.delete("d", rv="11"),
        w.create(cm("d", key="back"), rv="12"),
        # a second snapshot that no longer lists `s`: prune Always sweeps it from Git and state
        *w.snapshot(
            2,
            [cm("a", key="changed"), cm("c", key="again"), cm("d", key="back")],
            rv="13",
            object_rvs={"a": "10", "c": "11", "d": "12"},
        ),
    ]
    await append_work(any_log, cfg, items)
    await commit_all(any_log, cfg)


async def test_first_read_equals_the_branch_after_updates_deletes_and_compaction(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    # object-state with short segments, so Kafka's cleaner compacts it within the test
    spec = next(s for s in topic_specs(cfg) if s.name == state_topic(cfg))
    await any_log.create_topics([TopicSpec(spec.name, 1, "compact", segment_ms=100)])
    await _live(any_log, cfg)

    tree = files(remote)
    assert sorted(tree) == [f"live/team-a/configmaps/{n}.yaml" for n in ("a", "c", "d")]
    states = await first_read(any_log, cfg)
    assert as_files(states) == tree
    by_name = {k.name: s for k, s in states.items()}
    assert {n: (s.resource_version, s.author.username) for n, s in by_name.items()} == {
        "a": ("10", "bob"),
        "c": ("11", "alice@example.com"),
        "d": ("12", "alice@example.com"),
    }
    assert all(s.provider == "git" and s.branch == "main" and s.path == "live" for s in states.values())
    raw = await raw_keys(any_log, cfg)
    # once per version: the second snapshot re-lists a, c, d at the versions already written
    assert all(count == 1 for count in raw.values()), raw
    assert sorted(v for (k, v) in raw if k == b"t1//configmaps/team-a/d") == ["", "12", "9"]
    assert (b"t1//configmaps/team-a/b", "") in raw
    assert (b"t1//configmaps/team-a/s", "") in raw
    assert sum(raw.values()) == 11

    tp = TopicPartition(state_topic(cfg), 0)
    await asyncio.sleep(0.2)
    await any_log.append(tp.topic, b"filler", key=b"other-target/x/y/z/w")  # rolls the segment on Kafka
    end = (await any_log.end_offsets([tp]))[tp]

    async def compacted() -> bool:
        return len(await read_all(any_log, tp, 0, end)) < end

    if isinstance(any_log, EmbeddedLog):
        any_log.enforce_retention(now_ms=int(time.time() * 1000) + 3_600_000)
    await eventually(compacted, "compaction of object-state")
    assert as_files(await first_read(any_log, cfg)) == tree


async def test_a_redelivered_branch_writes_no_second_state_record(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """The group forgets its offsets (as after a crash before the commit): the work is read again, the
    branch tip skips it, and the key-level check writes nothing new to object-state."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    w = Work(step_ms=10)
    await append_work(any_log, cfg, [w.create(cm(f"o{i}"), ALICE, rv=str(i + 1)) for i in range(5)])
    worker = CommitWorker(cfg, any_log)
    await worker.start()
    await wait_settled(any_log, cfg)
    await worker.stop()
    before = await raw_keys(any_log, cfg)
    assert sum(before.values()) == 5
    assert all(count == 1 for count in before.values())

    await any_log.delete_group(group_id_for(cfg))
    again = CommitWorker(cfg.model_copy(update={"workdir": tmp_path / "second"}), any_log)
    await again.start()
    await wait_settled(any_log, cfg)
    await again.stop()
    assert await raw_keys(any_log, cfg) == before


async def test_states_written_before_a_crash_are_rewritten_after_it(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """Work on the branch whose state never reached the topic (killed in between) gets it on redelivery."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    w = Work(step_ms=10)
    items = [w.create(cm("x"), rv="3"), w.delete("x", rv="5"), w.create(cm("y"), rv="6")]
    await append_work(any_log, cfg, items)
    worker = CommitWorker(cfg, any_log)
    await worker.start()
    await wait_settled(any_log, cfg)
    await worker.stop()
    # as if the process died after the push and before the state of `y` and the offsets were written
    await any_log.delete_group(group_id_for(cfg))
    await any_log.append(state_topic(cfg), None, key=b"t1//configmaps/team-a/y")
    assert sorted(k.name for k in await first_read(any_log, cfg)) == []
    fresh = cfg.model_copy(update={"workdir": tmp_path / "second"})
    again = CommitWorker(fresh, any_log)
    await again.start()
    await wait_settled(any_log, cfg)
    await again.stop()
    states = await first_read(any_log, cfg)
    assert sorted(k.name for k in states) == ["y"]


class _FailingStateAppend:
    """The log, with the sizes of object-state appends noted and the `fail_at`-th one refused
    (as a broker that does not acknowledge in time): a stand-in only for that one failure."""

    def __init__(self, log: Log, topic: str, fail_at: int) -> None:
        self._log = log
        self._topic = topic
        self._fail_at = fail_at
        self.appends: list[int] = []
        self.refused = 0

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> object:
        if topic == self._topic:
            if len(self.appends) + self.refused + 1 == self._fail_at:
                self.refused += 1
                raise LogUnavailableError("object-state append refused by the test")
            self.appends.append(len(records))
        return await self._log.append_many(topic, records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


async def test_a_large_snapshots_states_are_written_in_chunks_once_each_across_a_failure(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """Issue 32: a snapshot's state records go out at most `STATE_APPEND_RECORDS` at a time (the
    loop is given back between two); a refused chunk is retried without writing the earlier ones
    again."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    objects = 2 * STATE_APPEND_RECORDS + 200
    w = Work(step_ms=10)
    await append_work(any_log, cfg, w.snapshot(1, [cm(f"o{n:04d}") for n in range(objects)], chunk_size=300))
    log = _FailingStateAppend(any_log, state_topic(cfg), fail_at=2)
    worker = CommitWorker(cfg, cast(Log, log))
    await worker.start()
    try:
        await wait_settled(any_log, cfg)
    finally:
        await worker.stop()
    assert log.refused == 1
    assert max(log.appends) == STATE_APPEND_RECORDS
    assert sum(log.appends) == objects
    raw = await raw_keys(any_log, cfg)
    assert len(raw) == objects
    assert set(raw.values()) == {1}
