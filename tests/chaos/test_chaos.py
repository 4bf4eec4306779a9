"""One seeded chaos run: people change a real cluster while every part of the deployment fails once.

Three `reverser run` replicas (leader election on) behind HAProxy, a three-broker Kafka cluster,
a real apiserver and a smart-HTTP Git remote; the workload runs while the faults of
`tests.chaos.faults` hit in a seeded order. The oracle then reads the pushed history against the
workload's record (see `tests.chaos.oracle`) and the cluster's final state, prints one summary
line, and fails on any lost, duplicated, misattributed or unknown-author change, any zombie
write, a branch whose ownership did not move off a killed replica, a target that did not
converge, or a consumer group left with lag. With `CHAOS_FACTS=admission` (no audit webhook,
facts from validating admission) an unknown author fails only where a fact for the change reached
the facts topic (`tests.chaos.oracle.check_facts`); the share named is printed.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio import client

from pipeline.codec.fact_batch import decode_fact_batch
from pipeline.content.sanitize import sanitize
from pipeline.log.api import TopicPartition
from pipeline.log.scan import extent_of, read_to_end
from pipeline.log.topics import TopicNames
from pipeline.watch.writer import WRITER_HEADER
from tests.chaos.env import (
    BRANCHES,
    COMMIT_WINDOW_S,
    GRACE_MS,
    ChaosEnv,
    FactSource,
    chaos_env,
    fact_source,
    watch_shards,
)
from tests.chaos.faults import Fault, Faults, ZombieWindow
from tests.chaos.history import first_pushes, read_files, read_transitions, version_keys
from tests.chaos.oracle import FactCheck, SeenFact, Verdict, check_facts, judge, percentile
from tests.chaos.workload import Target, Workload
from tests.e2e.kube import kube_client

pytestmark = pytest.mark.chaos

WORKERS = 3
MUTATION_INTERVAL_S = (0.8, 2.0)  # per worker
FAULT_GAP_S = (10.0, 20.0)
TAIL_S = 15.0  # workload keeps going after the last fault
CONVERGENCE_TIMEOUT_S = 240.0
SPREAD_TIMEOUT_S = 120.0
LAG_TIMEOUT_S = 120.0
POLL_S = 1.0
T = TypeVar("T")
KINDS = (("", "v1", "configmaps", "ConfigMap"), ("apps", "v1", "deployments", "Deployment"))


async def _cluster_state(env: ChaosEnv, target: Target) -> dict[str, dict[str, Any]]:
    """The sanitized objects of `target`'s namespace, by the Git path they belong at."""
    state: dict[str, dict[str, Any]] = {}
    async with kube_client(env.kubeconfig) as api:
        lists: dict[str, Callable[..., Awaitable[Any]]] = {
            "configmaps": client.CoreV1Api(api).list_namespaced_config_map,
            "deployments": client.AppsV1Api(api).list_namespaced_deployment,
        }
        for group, version, resource, kind in KINDS:
            # The raw JSON, as the watch sees it (the typed models drop nulls the watch keeps).
            response = await lists[resource](target.namespace, _preload_content=False)
            body = json.loads(await response.read())
            directory = f"{group}/{resource}" if group else resource
            for item in body["items"]:
                if item["metadata"].get("deletionTimestamp"):
                    continue
                item["apiVersion"] = f"{group}/{version}" if group else version
                item["kind"] = kind
                state[target.file(directory, item["metadata"]["name"])] = sanitize(item)
    return state


async def _differences(env: ChaosEnv) -> list[str]:
    """Paths where a branch's tree differs from the cluster's sanitized state (empty: converged)."""
    diffs = []
    for target in env.targets:
        expected = await _cluster_state(env, target)
        actual = await asyncio.to_thread(
            read_files, env.repo, target.branch, f"{target.path}/{target.namespace}"
        )
        for path in sorted(set(expected) | set(actual)):
            if expected.get(path) != actual.get(path):
                diffs.append(f"{target.branch}:{path}")
    return diffs


async def _group_lag(env: ChaosEnv) -> dict[str, int]:
    """Records not yet committed, per consumer group of this run's topics that has any."""
    async with env.log() as log:
        lag: dict[str, int] = {}
        for group in await log.list_groups():
            if not group.startswith(env.topic_prefix):
                continue
            committed = await log.group_offsets(group)
            topics = {tp.topic for tp in committed}
            tps = [TopicPartition(t, p) for t in topics for p in range(await log.partitions_for(t))]
            ends = await log.end_offsets(tps)
            behind = sum(end - committed.get(tp, 0) for tp, end in ends.items())
            if behind:
                lag[group] = behind
        return lag


async def _seen_facts(env: ChaosEnv) -> list[SeenFact]:
    """Every fact on the run's facts topic (admission facts go where audit facts do)."""
    async with env.log() as log:
        extent = await extent_of(log, TopicNames.for_prefix(env.topic_prefix).audit_facts)
        seen = []
        # stage times are UTC µs on this machine's clock; the workload's record is monotonic
        offset_s = time.time() - time.monotonic()
        async for chunk in read_to_end(log, extent):
            for record in chunk.records:
                _route, _group, resource, rows = decode_fact_batch(record)
                seen += [
                    SeenFact(r[0], r[3], resource, r[5], r[6], r[8], r[9] / 1e6 - offset_s) for r in rows
                ]
        return seen


async def _unmirrored(env: ChaosEnv) -> list[str]:
    """What keeps the pipeline from mirroring every watched stream: a shard nobody leads, or a
    stream without a cursor. Each first snapshot marks its baseline there before it begins; a
    change made before that is the cluster's starting state, committed by the committer."""
    led = [env.shards_led(i) for i in range(len(env.replicas))]
    if sum(led) < watch_shards():
        return [f"watch shards led per replica: {led}"]
    streams = sum(
        env.metric(replica, "reverser_watch_streams", state=state) or 0
        for replica in env.replicas
        for state in ("Replaying", "Streaming", "Backoff")
    )
    async with env.log() as log:
        topic = TopicNames.for_prefix(env.topic_prefix).watch_cursors
        keys = {
            record.key
            async for chunk in read_to_end(log, await extent_of(log, topic))
            for record in chunk.records
            if record.value is not None
        }
    if streams and len(keys) >= streams:
        return []
    return [f"{len(keys)} stream cursors for {streams:.0f} streams"]


async def _zombie_writes(env: ChaosEnv, windows: list[ZombieWindow]) -> tuple[int, list[int]]:
    """Records committed on the watch topics by a paused leader between its SIGCONT and its
    step-down, and how many each paused leader wrote in all (none would make the check vacuous)."""
    if not windows:
        return 0, []
    async with env.log() as log:
        topics = TopicNames.for_prefix(env.topic_prefix)
        zombie = 0
        written = [0] * len(windows)
        for topic in (topics.watch_events, topics.watch_cursors):
            async for chunk in read_to_end(log, await extent_of(log, topic)):
                for record in chunk.records:
                    writer = record.header(WRITER_HEADER)
                    for index, window in enumerate(windows):
                        written[index] += window.wrote(writer)
                        zombie += window.holds(writer, record.timestamp_ms)
        return zombie, written


def _fact_summary(check: FactCheck) -> str:
    return (
        f"admission facts: named right {check.named} of {check.changes} single-writer changes "
        f"({check.named_pct:.2f}%), unknown without a fact {len(check.factless)}, "
        f"unknown with a fact {len(check.unused)}, named without a fact found {len(check.unmatched)}"
    )


async def _settle(check: Callable[[], Awaitable[T]], timeout_s: float) -> tuple[bool, T]:
    """Poll `check` until it returns something empty (nothing left to differ); (settled, last value)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if not value:
            return True, value
        if time.monotonic() > deadline:
            return False, value
        await asyncio.sleep(POLL_S)


def _wall(monotonic_s: float) -> str:
    """A monotonic instant as UTC wall-clock time, to line it up with the replicas' logs."""
    wall = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=time.monotonic() - monotonic_s)
    return wall.strftime("%H:%M:%S.%f")[:-3]


def _summary(seed: int, workload: Workload, faults: Faults, verdict: Verdict, convergence_s: float) -> str:
    kinds = ",".join(f"{k}:{n}" for k, n in sorted(faults.log.counts.items()))
    p50, p99 = percentile(verdict.latencies_s, 0.5), percentile(verdict.latencies_s, 0.99)
    return (
        f"chaos seed={seed} mutations={len(workload.mutations)} faults={kinds} "
        f"lost={len(verdict.lost)} duplicated={len(verdict.duplicated)} "
        f"misattributed={len(verdict.misattributed)} unknown={len(verdict.unknown)} late={len(verdict.late)} "
        f"phantom={len(verdict.phantom)} merged={verdict.merged} zombie_writes={faults.log.zombie_writes} "
        f"convergence_s={convergence_s:.1f} latency_p50_s={p50:.2f} latency_p99_s={p99:.2f} "
        f"window_plus_grace_s={COMMIT_WINDOW_S + GRACE_MS / 1000:.1f} watch_shards={watch_shards()}"
    )


def test_no_change_is_lost_duplicated_or_misattributed_under_faults(
    chaos_seed: int, chaos_bin_dir: Path, tmp_path: Path
) -> None:
    with chaos_env(tmp_path, chaos_bin_dir, fact_source()) as env:
        asyncio.run(_run(env, chaos_seed))


async def _run(env: ChaosEnv, seed: int) -> None:
    workload = Workload(env.kubeconfig, env.targets, seed, WORKERS)
    faults = Faults(env, seed)
    # People change the cluster once the pipeline mirrors it; shards may still move after that
    # (the replicas start seconds apart), which is part of what is tested.
    mirroring, missing = await _settle(lambda: _unmirrored(env), SPREAD_TIMEOUT_S)
    assert mirroring, missing
    running = asyncio.create_task(workload.run(MUTATION_INTERVAL_S))

    # Work spreads: a replica reports a branch while its FIFO runs there, so gather the owners seen
    # until every branch was seen; more than one of the three replicas must run branches.
    owners_at_start: dict[str, int] = {}

    async def unspread() -> list[str]:
        owners_at_start.update(env.branch_owners())
        spread = len(owners_at_start) == BRANCHES and len(set(owners_at_start.values())) > 1
        return [] if spread else [f"owners seen so far: {owners_at_start}"]

    try:
        spread_ok, _ = await _settle(unspread, SPREAD_TIMEOUT_S)
        await faults.run(FAULT_GAP_S)
        await asyncio.sleep(TAIL_S)
    finally:
        workload.stop()
        await running
    last_fault_end = faults.log.last_fault_end

    converged, diffs = await _settle(lambda: _differences(env), CONVERGENCE_TIMEOUT_S)
    convergence_s = time.monotonic() - last_fault_end
    drained, lag = await _settle(lambda: _group_lag(env), LAG_TIMEOUT_S)
    faults.log.zombie_writes, zombie_written = await _zombie_writes(env, faults.log.zombie_windows)

    published = first_pushes(env.repo, env.git.pushes)
    transitions = [
        t for target in env.targets for t in read_transitions(env.repo, target.branch, target.path, published)
    ]
    verdict = judge(workload.mutations, transitions, COMMIT_WINDOW_S)
    print("\n" + _summary(seed, workload, faults, verdict, convergence_s))
    check = None
    if env.facts is FactSource.ADMISSION:
        keys = await asyncio.to_thread(
            version_keys, env.repo, [t for _, t in [*verdict.named, *verdict.late, *verdict.unknown]]
        )
        check = check_facts(verdict, keys, await _seen_facts(env))
        print(_fact_summary(check))
    foreign_missing = [
        (branch, path)
        for branch, path in faults.log.foreign_files
        if path not in read_files(env.repo, branch, path)
    ]
    report = {
        "owners_at_start": owners_at_start,
        "ownership_moves": faults.log.ownership_moves,
        "fault_times": faults.log.timeline,
        "zombie_windows": faults.log.zombie_windows,
        "zombie_written": zombie_written,
        "notes": faults.log.notes,
        "workload_failures": workload.failures[:20],
        "lost": [f"{_wall(m.at)} {m!r}" for m in verdict.lost[:20]],
        "duplicated": [repr(t) for t in verdict.duplicated[:20]],
        "misattributed": [f"{_wall(m.at)} {m!r} {t!r}" for m, t in verdict.misattributed[:20]],
        "unknown": [f"{_wall(m.at)} {m!r} {t!r}" for m, t in verdict.unknown[:20]],
        "late": [f"{_wall(m.at)} {m!r} {t!r}" for m, t in verdict.late[:20]],
        "phantom": [repr(t) for t in verdict.phantom[:20]],
        "not_converged": diffs[:20] if not converged else [],
        "lag": lag,
        "foreign_missing": foreign_missing,
    }
    if check is not None:
        report["factless"] = [f"{_wall(m.at)} {m!r} {t!r}" for m, t in check.factless[:20]]
        report["unknown_with_fact"] = [f"{_wall(m.at)} {m!r} {t!r}" for m, t in check.unused[:20]]
        report["named_without_fact"] = [f"{_wall(m.at)} {m!r} {t!r}" for m, t in check.unmatched[:20]]
    (env.workdir.parent / "chaos-report.json").write_text(json.dumps(report, indent=2, default=str))
    # The whole record, for triage: which mutations of whom came between two versions of a file.
    (env.workdir.parent / "chaos-mutations.txt").write_text(
        "".join(f"{_wall(m.at)} {m!r}\n" for m in sorted(workload.mutations, key=lambda m: m.at))
    )
    print(json.dumps(report, indent=2, default=str))

    assert spread_ok, f"branch partitions not spread over replicas: {owners_at_start}"
    kills = faults.log.counts[Fault.KILL_LEADER] + faults.log.counts[Fault.KILL_OWNER]
    assert len(faults.log.ownership_moves) == kills, "every replica kill had its ownership move checked"
    assert all(moved for _, moved in faults.log.ownership_moves), faults.log.ownership_moves
    assert faults.log.zombie_writes == 0
    assert all(zombie_written), (
        f"a paused leader's writer header matched no record: {faults.log.zombie_windows}"
    )
    assert converged, diffs[:20]
    assert drained, lag
    assert not foreign_missing
    assert not verdict.lost
    assert not verdict.duplicated
    assert not verdict.misattributed
    if check is None:
        assert not verdict.unknown
    else:
        # failurePolicy Ignore: a write whose review nobody answered has no fact, and can only be
        # unknown; one whose fact is on the log must be named, and the check must see every fact
        assert not check.unused
        assert not check.unmatched
