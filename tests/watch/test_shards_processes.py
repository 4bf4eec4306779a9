"""Shard hand-over with real processes: three `reverser run` replicas on the real broker share a
cluster's three watch shards; the replica leading the ConfigMaps' shard is SIGKILLed.

What must hold: the shards spread one per replica; after the kill a survivor takes the dead one's
shard once its Lease lapses, resumes from its cursor, and writes every change made meanwhile; and
per watched type the writers after the steady state change no more often than the type's shard
Lease changed holder, so no process wrote a type again without winning its Lease back.
The apiserver is the watch-protocol test server (over real HTTP); `make e2e` runs sharding on a
real one (`tests/e2e/test_watch_shards.py`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.log.topics import topic_specs
from pipeline.watch.shards import assign_shards, shard_of
from pipeline.watch.writer import WRITER_HEADER
from tests.conftest import started_log
from tests.support.process import ReverserProcess, bare_remote
from tests.support.wait import wait_for
from tests.watch.conftest import carriers, kinds, read_events
from tests.watch.kube_server import FakeKubeApiServer
from tests.watch.test_fencing_processes import replica_config as fencing_replica_config

SHARDS = 3
LEASE_BASE = "reverser-watch-src"
TYPES = {
    ("", "configmaps"): ("v1", "ConfigMap"),
    ("two.example.com", "widgets"): ("two.example.com/v1", "Widget"),
    ("", "services"): ("v1", "Service"),
    ("apps", "deployments"): ("apps/v1", "Deployment"),
}


def replica_config(settings: Settings, workdir: Path, kubeconfig: Path, remote: Path) -> dict[str, Any]:
    """The fencing test's replica, with its cluster in shards and a rule over every type."""
    config = fencing_replica_config(settings, workdir, kubeconfig, remote)
    config["clusters"][0]["watch_shards"] = SHARDS
    resources = [f"{g}/{r}" if g else r for g, r in TYPES]
    config["targets"][0]["rules"] = [{"resources": resources, "namespaces": ["team-a"]}]
    return config


def holders(kube: FakeKubeApiServer) -> dict[int, str]:
    names = [f"{LEASE_BASE}-shard-{shard}" for shard in range(SHARDS)]
    return dict(enumerate(kube.lease_holders("ops", names)))


def transitions(kube: FakeKubeApiServer) -> dict[int, int]:
    """Each shard Lease's `leaseTransitions`: how often it changed holder."""
    found = {}
    for shard in range(SHARDS):
        lease = kube.leases.get(("ops", f"{LEASE_BASE}-shard-{shard}")) or {}
        found[shard] = int((lease.get("spec") or {}).get("leaseTransitions") or 0)
    return found


def put_all(kube: FakeKubeApiServer, suffix: str) -> set[str]:
    names = set()
    for (_, resource), (api_version, kind) in TYPES.items():
        name = f"{resource[:-1]}-{suffix}"
        body: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": "team-a"},
        }
        kube.put(body)
        names.add(name)
    return names


@pytest.mark.parametrize("backend", ["kafka"], indirect=True)
async def test_a_sigkilled_shard_leader_hands_its_shard_over_without_loss_or_overlap(
    kube: FakeKubeApiServer, settings: Settings, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    async with started_log(settings) as log:
        await log.create_topics(topic_specs(settings))
    kubeconfig = kube.kubeconfig(tmp_path)
    remote = bare_remote(tmp_path / "remote.git")
    replicas = [
        ReverserProcess(tmp_path, f"r{i}", replica_config(settings, tmp_path / f"w{i}", kubeconfig, remote))
        for i in range(3)
    ]

    pids: dict[int, ReverserProcess] = {}

    def identity_of(holder: str) -> ReverserProcess | None:
        return next((r for pid, r in pids.items() if f"-{pid}-" in holder), None)

    try:
        for replica in replicas:
            replica.start()
            assert replica.pid is not None
            pids[replica.pid] = replica
        for replica in replicas:
            await wait_for(replica.ready, timeout_s=180, what=f"{replica.name} to be ready")

        def spread() -> bool:
            held = holders(kube)
            owners = {identity_of(h) for h in held.values()}
            return (
                None not in owners
                and len(owners) == SHARDS
                and held == assign_shards(LEASE_BASE, SHARDS, list(held.values()))
            )

        await wait_for(spread, timeout_s=60, what="one shard per replica")
        steady = holders(kube)
        steady_transitions = transitions(kube)
        before = put_all(kube, "before")

        async def on_the_log(names: set[str]) -> bool:
            # in a live event, or in a snapshot: a shard's new owner may hold its Lease (`spread`)
            # before it lists the type, and then lists the objects made since
            async with started_log(settings) as log:
                return names <= set(carriers(await read_events(log, settings)))

        await wait_for(lambda: on_the_log(before), timeout_s=60, what="the first changes on the log")

        victim_shard = shard_of("", "configmaps", SHARDS)
        victim = identity_of(steady[victim_shard])
        assert victim is not None
        await asyncio.to_thread(victim.kill)
        during = put_all(kube, "during")  # made while the shard has no live leader
        await wait_for(
            lambda: identity_of(holders(kube)[victim_shard]) not in (None, victim),
            timeout_s=60,
            what="a survivor to take the dead replica's shard",
        )
        after = put_all(kube, "after")
        await wait_for(
            lambda: on_the_log(before | during | after), timeout_s=90, what="every change on the log"
        )
        async with started_log(settings) as log:
            # the live events of the objects made after the steady state: a type's live events share
            # one key, so their log order is the order they were written (snapshot records of the
            # start-up hand-overs may sit in other partitions)
            made = {f"ADDED {name}" for name in before | during | after}
            logged = await read_events(log, settings)
            events = [e for e, kind in zip(logged, kinds(logged), strict=True) if kind in made]
            after_kill = carriers(logged)["configmap-after"]
    finally:
        codes = [await asyncio.to_thread(r.stop) for r in replicas]
    survivors = [code for r, code in zip(replicas, codes, strict=True) if r is not victim]
    assert survivors == [0, 0], "".join(r.log_tail() for r in replicas)

    by_type: dict[tuple[str, str], list[str]] = {}
    for event in events:
        writer = event["_headers"][WRITER_HEADER].decode()
        owner = identity_of(writer)
        assert owner is not None, writer
        by_type.setdefault((event["group"], event["resource"]), []).append(owner.name)
    moves = {shard: n - steady_transitions[shard] for shard, n in transitions(kube).items()}
    for (group, resource), writers in by_type.items():
        switches = [i for i in range(1, len(writers)) if writers[i] != writers[i - 1]]
        # every change of writer is a hand-over of the type's shard Lease (a loaded host may hand
        # a shard over more than once); a writer that came back without one would be a zombie
        shard = shard_of(group, resource, SHARDS)
        assert len(switches) <= moves[shard], (
            f"{group}/{resource} written in turns: {writers}, shard Lease moves {moves}"
        )
    # the survivor wrote the change after the kill, live or in the snapshot it took over with
    assert identity_of(after_kill["_headers"][WRITER_HEADER].decode()) not in (None, victim)
