"""The commit worker on a real log (embedded and, kafka-marked, the real broker) and a bare remote."""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.codec.branch_work import work_record
from pipeline.commit.consumer import CommitWorker, group_id_for
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log.api import Log
from pipeline.log.partitioner import murmur2_partition
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import branch_key
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, files, log_lines
from tests.commit.logwork import append_work, commit_all, committed_offset, wait_settled
from tests.conformance.test_log_conformance import read_all
from tests.support.wait import wait_for


def with_git(settings: Settings, remote: Path, **provider: object) -> Settings:
    return settings.model_copy(
        update={
            "providers": [
                ProviderSettings(
                    name="git", url=str(remote), commit_window_s=0.2, push_cooldown_s=0.2, **provider
                )
            ],
            "targets": [TargetSettings(name="t1", provider="git", path="live", prune="Always")],
        }
    )


async def test_branch_work_becomes_attributed_history(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    w = Work(step_ms=10)
    items = [
        *w.snapshot(1, [cm("a"), cm("b")], rv="7"),
        w.create(cm("c")),
        w.create(cm("d")),
        w.update(cm("a", key="changed"), BOB),
        w.delete("b", BOB),
    ]
    await append_work(any_log, cfg, items)
    worker = await commit_all(any_log, cfg)
    assert log_lines(remote, fmt="%an|%s") == [
        "Reverser Pipeline|reconciled 2 configmaps (last resourceVersion: 7)",
        "Alice Example|alice@example.com on t1: 2 resource(s)",
        "Bob|bob on t1: 2 resource(s)",
    ]
    assert sorted(files(remote)) == [
        "live/team-a/configmaps/a.yaml",
        "live/team-a/configmaps/c.yaml",
        "live/team-a/configmaps/d.yaml",
    ]
    assert worker.ready() is False


async def test_replay_from_the_beginning_reproduces_trees_and_authors(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """Replaying branch-work into an empty remote rebuilds the same history."""
    first = bare_remote(tmp_path / "first.git")
    second = bare_remote(tmp_path / "second.git")
    w = Work(step_ms=150)
    items = [w.create(cm(f"x{i}"), ALICE if i % 3 else BOB) for i in range(12)]
    items += w.snapshot(1, [cm("x1"), cm("x2")])
    items += [w.delete("x4", BOB), w.update(cm("x5", key="v2"))]
    cfg = with_git(settings, first)
    await append_work(any_log, cfg, items)
    worker = CommitWorker(cfg, any_log)
    await worker.start()
    await wait_settled(any_log, cfg)
    await worker.stop()

    replay_cfg = cfg.model_copy(
        update={
            "providers": [cfg.providers[0].model_copy(update={"url": str(second)})],
            "workdir": tmp_path / "replay-work",
        }
    )
    await any_log.delete_group(group_id_for(cfg))
    again = CommitWorker(replay_cfg, any_log)
    await again.start()
    await wait_settled(any_log, replay_cfg)
    await again.stop()
    fmt = "%T|%an <%ae>|%s"
    assert log_lines(first, fmt=fmt) == log_lines(second, fmt=fmt)
    assert len(log_lines(first)) >= 4


async def test_bad_records_are_skipped_not_fatal(settings: Settings, any_log: Log, tmp_path: Path) -> None:
    from pipeline.log.topics import TopicNames

    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    w = Work()
    await append_work(any_log, cfg, [w.create(cm("before"))])
    topic = TopicNames.for_prefix(cfg.log.topic_prefix).branch_work
    from pipeline.models import branch_key

    await any_log.append(topic, b"\x00garbage", key=branch_key("git", "main"))
    await append_work(any_log, cfg, [w.create(cm("after"), BOB), Work(provider="nope").create(cm("x"))])
    worker = CommitWorker(cfg, any_log)
    await worker.start()
    try:
        await wait_settled(any_log, cfg)
        assert worker.ready()
    finally:
        await worker.stop()
    assert sorted(files(remote)) == [
        "live/team-a/configmaps/after.yaml",
        "live/team-a/configmaps/before.yaml",
    ]


async def test_unreachable_remote_commits_no_offsets(
    settings: Settings, any_log: Log, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is settled while the remote cannot be reached; the work waits on the log."""
    cfg = with_git(settings, tmp_path / "missing.git")
    w = Work()
    [(partition, _)] = await append_work(any_log, cfg, [w.create(cm("a"))])
    worker = CommitWorker(cfg, any_log)
    caplog.set_level(logging.ERROR, logger="pipeline.commit.branch")
    await worker.start()
    try:
        # the positive signal: the record was read, given to its branch, and the sync has failed
        await wait_for(
            lambda: (
                ("git", "main") in worker.owned_branches()
                and any("cannot reach git" in r.getMessage() for r in caplog.records)
            ),
            "the branch worker failing to reach the remote",
        )
    finally:
        await worker.stop()
    assert await committed_offset(any_log, cfg, partition) == 0


async def test_rebalance_between_two_members_commits_everything_once(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """A second member joins mid-stream: revoked branches are flushed, nothing is lost or doubled."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    branches = [f"b{i}" for i in range(6)]
    builders = {b: Work(branch=b, step_ms=10_000) for b in branches}
    first = [builders[b].create(cm(f"{b}-1")) for b in branches]
    second = [builders[b].create(cm(f"{b}-2"), BOB) for b in branches]
    await append_work(any_log, cfg, first)
    one = CommitWorker(cfg, any_log)
    await one.start()
    await wait_for(lambda: list(one.owned_branches()), "the first member taking work")
    # the first member's branch workers, read here as a test may; a revoked one must be freed
    # although its home index was frozen out of the collector's walks (pipeline/gcpolicy.py)
    first_workers = {key: weakref.ref(branch.worker) for key, branch in one._branches.items()}
    other_cfg = cfg.model_copy(update={"workdir": tmp_path / "other-work"})
    two = CommitWorker(other_cfg, any_log)
    await two.start()
    await append_work(any_log, cfg, second)
    try:
        await wait_settled(any_log, cfg)
        revoked = set(first_workers) - set(one.owned_branches())
        assert revoked, "the second member took no branch from the first"
        assert all(first_workers[key]() is None for key in revoked)
    finally:
        await two.stop()
        await one.stop()
    for b in branches:
        assert log_lines(remote, b, fmt="%s") == [
            f"[CREATE] v1/configmaps/{b}-1",
            f"[CREATE] v1/configmaps/{b}-2",
        ]


async def test_concurrent_foreign_pushes_lose_no_write(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """Humans keep pushing to the branch while the worker commits: every write of both sides lands."""
    import subprocess
    import threading

    from tests.commit.helpers import foreign_push

    remote = bare_remote(tmp_path / "remote.git")
    foreign_push(remote, tmp_path, "human/0.txt", "0\n")
    cfg = with_git(settings, remote)
    cfg.providers[0].commit_window_s = 0
    cfg.providers[0].push_cooldown_s = 0
    stop = threading.Event()
    pushed: list[str] = []

    def human() -> None:
        n = 1
        while not stop.is_set() and n < 40:
            path = f"human/{n}.txt"
            try:
                foreign_push(remote, tmp_path, path, f"{n}\n")
            except subprocess.CalledProcessError:  # rejected: the worker pushed first; try again
                continue
            pushed.append(path)
            n += 1

    w = Work(step_ms=10)
    items = [w.create(cm(f"w{i}"), ALICE if i % 2 else BOB) for i in range(30)]
    await any_log.create_topics(topic_specs(cfg))
    worker = CommitWorker(cfg, any_log)
    await worker.start()
    thread = threading.Thread(target=human)
    thread.start()
    try:
        for chunk in range(0, len(items), 5):
            landed = len(pushed)
            await append_work(any_log, cfg, items[chunk : chunk + 5])
            # Each chunk overlaps a foreign push (on a loaded machine the human may lose every
            # race while the worker pushes, and the work could otherwise end before one lands).
            await wait_for(
                lambda landed=landed: len(pushed) > landed or not thread.is_alive(),  # type: ignore[misc]
                what="a foreign push landing while the worker commits",
                timeout_s=120,
            )
        await wait_settled(any_log, cfg, timeout_s=120)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
        await worker.stop()
    tree = files(remote)
    assert {f"live/team-a/configmaps/w{i}.yaml" for i in range(30)} <= set(tree)
    assert {"human/0.txt", *pushed} <= set(tree)
    from tests.commit.helpers import git

    assert git(remote, "rev-list", "--merges", "main").strip() == ""
    ours = [s for s in log_lines(remote, fmt="%s") if s.startswith("[CREATE]")]
    assert len(ours) == len(set(ours)) == 30


async def test_ownership_metrics_follow_the_group_assignment(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """Two members share the branch partitions; when one leaves, the other owns them all again."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    topic = TopicNames.for_prefix(cfg.log.topic_prefix).branch_work
    everything = {(topic, p) for p in range(cfg.log.topics.branch_work_partitions)}
    branches = [f"b{i}" for i in range(8)]
    await append_work(any_log, cfg, [Work(branch=b).create(cm(b)) for b in branches])

    def scraped() -> set[tuple[str, int]]:
        return {
            (s.labels["topic"], int(s.labels["partition"]))
            for family in REGISTRY.collect()
            if family.name == "reverser_commit_owned_partition"
            for s in family.samples
            if s.labels["topic"] == topic
        }

    one = CommitWorker(cfg, any_log)
    two = CommitWorker(cfg.model_copy(update={"workdir": tmp_path / "other-work"}), any_log)
    await one.start()
    try:
        await wait_for(lambda: set(one.owned_partitions()) == everything, what="one member owning all")
        assert scraped() == everything
        await two.start()
        await wait_for(
            lambda: set(one.owned_partitions()) and set(two.owned_partitions()), what="a rebalance"
        )
        await wait_for(
            lambda: set(one.owned_partitions()) | set(two.owned_partitions()) == everything,
            what="every partition owned",
        )
        assert not set(one.owned_partitions()) & set(two.owned_partitions())
        assert scraped() == everything
        # a branch FIFO runs only where its partition is owned (FIFOs start with their first work
        # after each rebalance, so not every branch needs one right now)
        partitions = cfg.log.topics.branch_work_partitions
        for worker in (one, two):
            owned = {p for _, p in worker.owned_partitions()}
            for provider, branch in worker.owned_branches():
                assert murmur2_partition(branch_key(provider, branch), partitions) in owned
        await two.stop()
        await wait_for(lambda: set(one.owned_partitions()) == everything, what="ownership moving back")
    finally:
        await two.stop()
        await one.stop()
    assert not scraped(), "a stopped worker owns nothing"


REBALANCE_ROUNDS = 3


async def test_rebalances_while_work_flows_never_touch_a_revoked_partition(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """A second member joins and leaves several times while work is appended: no worker task dies
    (a revoked partition is neither read, sought nor committed by its former owner), no branch
    FIFO runs on a partition its worker does not own, and every write lands exactly once."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    partitions = cfg.log.topics.branch_work_partitions
    branches = [f"b{i}" for i in range(8)]
    builders = {b: Work(branch=b, step_ms=10_000) for b in branches}
    expected: dict[str, list[str]] = {b: [] for b in branches}
    one = CommitWorker(cfg, any_log)
    workers = [one]

    def fifos_on_owned_partitions() -> None:
        for worker in workers:
            owned = {p for _, p in worker.owned_partitions()}
            for provider, branch in worker.owned_branches():
                assert murmur2_partition(branch_key(provider, branch), partitions) in owned, (
                    f"{worker.clones}: FIFO of {branch} runs on a partition it does not own"
                )

    def owns_some(worker: CommitWorker) -> bool:
        return bool(set(worker.owned_partitions()))

    produced = 0

    async def produce(rounds: int) -> None:
        nonlocal produced
        for _ in range(rounds):
            n, produced = produced, produced + 1
            items = []
            for b in branches:
                items.append(builders[b].create(cm(f"{b}-{n}"), ALICE if n % 2 else BOB))
                expected[b].append(f"[CREATE] v1/configmaps/{b}-{n}")
            await append_work(any_log, cfg, items)
            fifos_on_owned_partitions()
            await asyncio.sleep(0.05)

    await any_log.create_topics(topic_specs(cfg))
    await one.start()
    try:
        for round_ in range(REBALANCE_ROUNDS):
            two = CommitWorker(cfg.model_copy(update={"workdir": tmp_path / f"work-{round_}"}), any_log)
            workers.append(two)
            producing = asyncio.create_task(produce(6))
            await two.start()
            await wait_for(functools.partial(owns_some, two), what="the second member owning partitions")
            await producing
            fifos_on_owned_partitions()
            await produce(2)
            assert two.ready(), "a task of the joining worker died"
            assert one.ready(), "a task of the first worker died"
            await two.stop()
            workers.remove(two)
        await produce(2)
        await wait_settled(any_log, cfg, timeout_s=120)
        assert one.ready(), "a task of the first worker died"
    finally:
        for worker in workers:
            await worker.stop()
    for b in branches:
        assert log_lines(remote, b, fmt="%s") == expected[b]


async def test_a_new_owner_commits_past_the_marker_its_predecessor_stopped_short_of(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """The router appends branch work in transactions, so on Kafka each partition ends with a
    marker. A worker killed after it committed its last work, but before it saw that marker,
    leaves the group one short of the end; its successor gets no record there and must still
    commit to the end, without committing anything twice (chaos seed 488418)."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = with_git(settings, remote)
    names = TopicNames.for_prefix(cfg.log.topic_prefix)
    await any_log.create_topics(topic_specs(cfg))
    w = Work(step_ms=10)
    producer = any_log.transactional_producer(f"{cfg.log.topic_prefix}.router-test")
    await producer.start()
    try:
        await producer.commit({names.branch_work: [work_record(w.create(cm("a")))]})
        await producer.commit({names.branch_work: [work_record(w.create(cm("b"), BOB))]})
    finally:
        await producer.close()
    await commit_all(any_log, cfg)
    history = log_lines(remote, fmt="%an|%s")
    assert len(history) == 2
    committed = await any_log.group_offsets(group_id_for(cfg))
    ends = await any_log.end_offsets(list(committed))
    (tp,) = [p for p, end in ends.items() if end > 0]  # one branch: one partition holds the work
    last_record = (await read_all(any_log, tp, 0, ends[tp]))[-1].offset
    await any_log.commit_group_offsets(group_id_for(cfg), {tp: last_record + 1})
    await commit_all(any_log, cfg)  # waits until the group is at every partition's end
    assert log_lines(remote, fmt="%an|%s") == history
