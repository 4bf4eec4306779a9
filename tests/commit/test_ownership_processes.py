"""Branch work spreads over three real `reverser run` processes, and a SIGKILL moves it without loss.

Three replicas share one commit-worker group on the real Kafka broker. Twelve branches are picked
so that every branch-work partition holds one, so whatever the assignor does, every replica that
owns a partition owns a branch. The ownership gauges (`reverser_commit_owned_partition`,
`reverser_commit_owned_branch`) must show the branches spread over more than one replica, each
owned once; after a SIGKILL of the replica owning the most branches (with work in flight) the
survivors own every branch and every change is on the remote exactly once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import LogSettings, Settings
from pipeline.log.partitioner import murmur2_partition
from pipeline.models import branch_key
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.conftest import started_log, unique_prefix
from tests.e2e.service_process import ServiceProcess
from tests.support.net import free_port
from tests.support.process import KILLED_MEMBER_SESSION_TIMEOUT_MS
from tests.support.wait import wait_for

pytestmark = pytest.mark.kafka

REPLICAS = 3
PROVIDER = "git"
SETTLE_TIMEOUT_S = 120.0


def branches_covering(partitions: int) -> list[str]:
    """One branch name per branch-work partition (the first `b<i>` that hashes there)."""
    chosen: dict[int, str] = {}
    i = 0
    while len(chosen) < partitions:
        name = f"b{i}"
        chosen.setdefault(murmur2_partition(branch_key(PROVIDER, name), partitions), name)
        i += 1
    return [chosen[p] for p in range(partitions)]


def replica_config(workdir: Path, log: LogSettings, remote: Path, branches: list[str]) -> dict[str, Any]:
    return {
        "workdir": str(workdir),
        "log": {
            "bootstrap_servers": log.bootstrap_servers,
            "topic_prefix": log.topic_prefix,
            "session_timeout_ms": KILLED_MEMBER_SESSION_TIMEOUT_MS,
        },
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "providers": [{"name": PROVIDER, "url": str(remote), "commit_window_s": 0.2, "push_cooldown_s": 0.2}],
        "targets": [{"name": f"t-{b}", "provider": PROVIDER, "branch": b, "path": "live"} for b in branches],
    }


def owned(replica: ServiceProcess, gauge: str, label: str) -> set[str]:
    """The label values of a replica's ownership gauge that are set (empty while it is down)."""
    if replica.pid is None:
        return set()
    try:
        return {labels[label] for labels, value in replica.metric_samples(gauge) if value > 0}
    except OSError:
        return set()


def partitions_of(replica: ServiceProcess) -> set[str]:
    return owned(replica, "reverser_commit_owned_partition", "partition")


def branches_of(replica: ServiceProcess) -> set[str]:
    return owned(replica, "reverser_commit_owned_branch", "branch")


async def test_branches_spread_over_replicas_and_a_kill_moves_them_without_loss(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    log_settings = LogSettings(
        backend="kafka", bootstrap_servers=kafka_bootstrap, topic_prefix=unique_prefix()
    )
    settings = Settings(workdir=tmp_path / "writer", log=log_settings)
    partitions = settings.log.topics.branch_work_partitions
    branches = branches_covering(partitions)
    every_partition = {str(p) for p in range(partitions)}
    remote = bare_remote(tmp_path / "remote.git")
    builders = {b: Work(branch=b, target=f"t-{b}", step_ms=10_000) for b in branches}
    expected: dict[str, list[str]] = {b: [] for b in branches}

    async def append_round(round_: int) -> None:
        items = [builders[b].create(cm(f"{b}-{round_}"), BOB if round_ % 2 else ALICE) for b in branches]
        for b in branches:
            expected[b].append(f"[CREATE] v1/configmaps/{b}-{round_}")
        async with started_log(settings) as log:
            await append_work(log, settings, items)

    async def settled() -> None:
        async with started_log(settings) as log:
            await wait_settled(log, settings, timeout_s=SETTLE_TIMEOUT_S)

    replicas = []
    for index in range(REPLICAS):
        workdir = tmp_path / f"replica-{index}"
        workdir.mkdir()
        config = replica_config(workdir / "work", log_settings, remote, branches)
        replicas.append(ServiceProcess(workdir, config, log_level="INFO"))
    await append_round(0)
    try:
        await asyncio.gather(*(asyncio.to_thread(r.start) for r in replicas))

        def spread() -> bool:
            owners = [partitions_of(r) for r in replicas]
            return (
                set().union(*owners) == every_partition
                and sum(len(o) for o in owners) == partitions
                and sum(1 for o in owners if o) == REPLICAS
            )

        await wait_for(spread, timeout_s=SETTLE_TIMEOUT_S, what="every partition owned once, by all three")
        await settled()
        # FIFOs start with a branch's first work after a rebalance: one more round shows every branch
        await append_round(1)
        await settled()

        def branches_owned_once() -> bool:
            owners = [branches_of(r) for r in replicas]
            return set().union(*owners) == set(branches) and sum(len(o) for o in owners) == len(branches)

        await wait_for(branches_owned_once, timeout_s=30, what="every branch's FIFO running on one replica")
        before = [branches_of(r) for r in replicas]
        assert sum(1 for b in before if b) > 1, f"branches on one replica only: {before}"

        victim_index = max(range(REPLICAS), key=lambda i: len(before[i]))
        victim = replicas[victim_index]
        survivors = [r for i, r in enumerate(replicas) if i != victim_index]
        await append_round(2)
        await asyncio.to_thread(victim.kill)

        def moved() -> bool:
            owners = [partitions_of(r) for r in survivors]
            return set().union(*owners) == every_partition and sum(len(o) for o in owners) == partitions

        await wait_for(moved, timeout_s=SETTLE_TIMEOUT_S, what="the survivors owning every partition")
        await settled()
        await append_round(3)
        await settled()

        def victims_branches_moved() -> bool:
            return before[victim_index] <= set().union(*(branches_of(r) for r in survivors))

        await wait_for(
            victims_branches_moved, timeout_s=30, what="the killed replica's branches on survivors"
        )
    finally:
        for replica in replicas:
            await asyncio.to_thread(replica.stop)

    for b in branches:
        subjects = log_lines(remote, b, fmt="%s")
        assert Counter(subjects) == Counter(expected[b]), f"branch {b}: {subjects}"
