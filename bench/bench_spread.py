"""Watch shards spread a cluster's CPU over the replicas (issue 32): three replicas, 1 vs 3 shards.

On a real kube-apiserver, OBJECTS objects of each of three types (chosen by `shard_of` so that with
`watch_shards: 3` each type is a shard of its own: ConfigMaps, ServiceAccounts and RoleBindings,
1 KiB of annotation each) are spread over three namespaces, one target (and branch) per namespace.
Three `reverser run` replicas with leader election share one Kafka broker (started from the cached
jars, or `KAFKA_BOOTSTRAP_SERVERS`) and a local bare Git remote. They start together, first with
`watch_shards: 1`, then with `watch_shards: 3`, each run on its own topics, Lease and remote.

Per run: which replica leads which shard (read from the shard Leases) and when every shard was
first held by as many replicas as can; the time from the launch until every object is a file on
its branch; each replica's CPU-seconds (its own and its reaped git children's, from
/proc/<pid>/stat) during that first sync (from the launch: the imports are in it, alike for every
replica, as a replica is ready only about when its sync is done) and during a steady phase of
RATE patches a second for DURATION_S until every object's last patch is on the remote; and the
busiest replica's share and max/min over the replicas. The figure: the busiest replica's share
with 3 shards against 1 shard, in one command. Every stage but the watch spreads by Kafka
partition in both runs, so the difference between the runs is the watch's. The broker gets its
first transaction and group commit before the runs (else the first run alone waits for its
internal topics), and each run's patches set values no earlier run set (a repeated value is a
no-op for the apiserver: no event).

Sizes: `REVERSER_BENCH_SPREAD_OBJECTS` (per type, default 3000), `REVERSER_BENCH_SPREAD_RATE`
(patches a second over all types, default 30), `REVERSER_BENCH_SPREAD_DURATION_S` (default 30);
`REVERSER_BENCH_SPREAD_ORDER` (default `1,3`) the runs' `watch_shards` in order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from kubernetes_asyncio import client

from bench.bench_scale import proc_figures
from bench.kafka import kafka_bootstrap
from bench.spread import Spread, dealt_out, holder_replica, spread_of, types_per_shard
from pipeline.watch.shards import shard_lease_name
from tests.chaos.env import seed_remote
from tests.e2e.cluster.controlplane import ControlPlane, build_binaries
from tests.e2e.kube import kube_client
from tests.e2e.service_process import ServiceProcess
from tests.support.net import free_port
from tests.support.process import ReverserProcess

OBJECTS = int(os.environ.get("REVERSER_BENCH_SPREAD_OBJECTS", "3000"))
RATE = float(os.environ.get("REVERSER_BENCH_SPREAD_RATE", "30"))
DURATION_S = float(os.environ.get("REVERSER_BENCH_SPREAD_DURATION_S", "30"))
#: The runs' `watch_shards`, in order (`3,1` checks that the order is not the difference).
ORDER = [int(n) for n in os.environ.get("REVERSER_BENCH_SPREAD_ORDER", "1,3").split(",") if n]
REPLICAS = 3
SHARDED = 3
NAMESPACES = ("spread-a", "spread-b", "spread-c")
RBAC = "rbac.authorization.k8s.io"
#: Types the bench can create, in order of preference; `types_per_shard` takes one per shard.
CANDIDATES = ("configmaps", "serviceaccounts", f"{RBAC}/rolebindings", f"{RBAC}/roles", "limitranges")
PAYLOAD_BYTES = 1024
CREATE_CONCURRENCY = 32
LEASE_NAMESPACE = "kube-system"
LEASE_DURATION_S = 8.0
LEASE_RENEW_S = 2.0
COMMIT_WINDOW_S = 2.0
SYNC_TIMEOUT_S = 900.0
POLL_S = 0.5
#: Between the first sync and the steady phase: the last pushes and lag reports settle.
QUIET_S = 5.0
CLUSTER = "spread"
#: Each run's patches number from its own block, so none repeats a value an earlier run set.
SEQ_STRIDE = 10_000_000
SEQ_PATTERN = re.compile(r"bench/seq: ['\"]?([0-9]+)")


def _meta(name: str, seq: int) -> client.V1ObjectMeta:
    return client.V1ObjectMeta(
        name=name, annotations={"bench/payload": "x" * PAYLOAD_BYTES, "bench/seq": str(seq)}
    )


def _creator(api: client.ApiClient, kind: str) -> Callable[[str, str], Awaitable[Any]]:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    if kind == "configmaps":
        return lambda ns, name: core.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=_meta(name, 0))
        )
    if kind == "serviceaccounts":
        return lambda ns, name: core.create_namespaced_service_account(
            ns, client.V1ServiceAccount(metadata=_meta(name, 0))
        )
    if kind == f"{RBAC}/rolebindings":
        return lambda ns, name: rbac.create_namespaced_role_binding(
            ns,
            client.V1RoleBinding(
                metadata=_meta(name, 0),
                role_ref=client.V1RoleRef(api_group=RBAC, kind="ClusterRole", name="view"),
                subjects=[client.RbacV1Subject(api_group=RBAC, kind="User", name=name)],
            ),
        )
    if kind == f"{RBAC}/roles":
        return lambda ns, name: rbac.create_namespaced_role(
            ns, client.V1Role(metadata=_meta(name, 0), rules=[])
        )
    if kind == "limitranges":
        return lambda ns, name: core.create_namespaced_limit_range(
            ns, client.V1LimitRange(metadata=_meta(name, 0), spec=client.V1LimitRangeSpec(limits=[]))
        )
    raise ValueError(f"the bench cannot create {kind}")


def _patcher(api: client.ApiClient, kind: str) -> Callable[[str, str, Any], Awaitable[Any]]:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    patchers: dict[str, Callable[[str, str, Any], Awaitable[Any]]] = {
        "configmaps": core.patch_namespaced_config_map,
        "serviceaccounts": core.patch_namespaced_service_account,
        f"{RBAC}/rolebindings": rbac.patch_namespaced_role_binding,
        f"{RBAC}/roles": rbac.patch_namespaced_role,
        "limitranges": core.patch_namespaced_limit_range,
    }
    return patchers[kind]


def _name(n: int) -> str:
    return f"obj-{n:05d}"


async def create_objects(kubeconfig: Path, kinds: list[str]) -> None:
    """OBJECTS of each kind, dealt over the namespaces."""
    async with kube_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        for namespace in NAMESPACES:
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(make: Callable[[str, str], Awaitable[Any]], n: int) -> None:
            async with gate:
                await make(NAMESPACES[n % len(NAMESPACES)], _name(n))

        await asyncio.gather(*(create(_creator(api, kind), n) for kind in kinds for n in range(OBJECTS)))


async def mutate(kubeconfig: Path, kinds: list[str], first_seq: int) -> set[int]:
    """RATE patches a second for DURATION_S, round robin over the kinds and their objects; each
    patch sets `bench/seq` to its own number, from `first_seq` on (a number an object had before
    would make the patch a no-op: no event). Returns the numbers the objects end with."""
    async with kube_client(kubeconfig) as api:
        patchers = [_patcher(api, kind) for kind in kinds]
        total = int(RATE * DURATION_S)
        started = time.monotonic()
        tasks: list[asyncio.Future[Any]] = []
        final: dict[tuple[int, int], int] = {}
        for n in range(total):
            delay = started + n / RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            index = (n // len(kinds)) % OBJECTS
            body = {"metadata": {"annotations": {"bench/seq": str(first_seq + n)}}}
            patch = patchers[n % len(kinds)]
            final[(n % len(kinds), index)] = first_seq + n
            tasks.append(
                asyncio.ensure_future(patch(_name(index), NAMESPACES[index % len(NAMESPACES)], body))
            )
        await asyncio.gather(*tasks)
        return set(final.values())


async def shard_leaders(
    kubeconfig: Path, base: str, shards: int, pids: list[int | None]
) -> dict[int, int | None]:
    """Shard to the index of the replica holding its Lease (None: vacant or unknown)."""
    async with kube_client(kubeconfig) as api:
        leases = client.CoordinationV1Api(api)
        found: dict[int, int | None] = {}
        for shard in range(shards):
            try:
                lease = await leases.read_namespaced_lease(
                    shard_lease_name(base, shard, shards), LEASE_NAMESPACE
                )
            except client.ApiException:
                found[shard] = None
                continue
            found[shard] = holder_replica(lease.spec.holder_identity or "", pids)
        return found


def files_on_branches(repo: Path) -> int:
    """Object files over every namespace's branch (the seed README left out)."""
    count = 0
    for branch in NAMESPACES:
        listing = subprocess.run(
            ["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only", branch],
            capture_output=True,
            text=True,
            check=False,
        )
        count += sum(1 for line in listing.stdout.splitlines() if line != "README.md")
    return count


async def warm_broker(bootstrap: str) -> None:
    """A first transaction and a first group commit, so the broker's internal topics exist before
    the first run: otherwise that run alone waits for them (and its clients retry meanwhile)."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # coordinator retries while it appears
    topic = f"spread-warm-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=topic)
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait(topic, b"warm")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=topic, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): 1})
    finally:
        await consumer.stop()


def seqs_on_branches(repo: Path) -> set[int]:
    """Every `bench/seq` number the branch tips carry."""
    found: set[int] = set()
    for branch in NAMESPACES:
        listing = subprocess.run(
            ["git", "--git-dir", str(repo), "grep", "-h", "-o", "-E", SEQ_PATTERN.pattern, branch],
            capture_output=True,
            text=True,
            check=False,
        )
        found.update(int(m.group(1)) for m in SEQ_PATTERN.finditer(listing.stdout))
    return found


def replica_config(
    run_dir: Path, index: int, kubeconfig: Path, bootstrap: str, shards: int
) -> dict[str, Any]:
    kinds = list(types_per_shard(CANDIDATES, SHARDED).values())
    return {
        "workdir": str(run_dir / f"replica-{index}" / "work"),
        "log": {
            "backend": "kafka",
            "bootstrap_servers": bootstrap,
            "topic_prefix": run_dir.name,
            "client_id": f"reverser-{index}",
        },
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "clusters": [
            {
                "name": CLUSTER,
                "kubeconfig": str(kubeconfig),
                "attribution": "configured-author",
                "leader_election": True,
                "lease_namespace": LEASE_NAMESPACE,
                "lease_name": run_dir.name,
                "lease_duration_s": LEASE_DURATION_S,
                "lease_renew_s": LEASE_RENEW_S,
                "watch_shards": shards,
            }
        ],
        "providers": [
            {
                "name": "git",
                "url": str(run_dir / "remote.git"),
                "commit_window_s": COMMIT_WINDOW_S,
                "push_cooldown_s": 0.5,
            }
        ],
        "targets": [
            {
                "name": namespace,
                "provider": "git",
                "branch": namespace,
                "path": "live",
                "cluster": CLUSTER,
                "rules": [{"resources": kinds, "namespaces": [namespace]}],
            }
            for namespace in NAMESPACES
        ],
    }


@dataclass(frozen=True, slots=True)
class RunFigures:
    shards: int
    leaders_synced: dict[int, int | None]
    leaders_steady: dict[int, int | None]
    sync_s: float
    dealt_s: float | None
    first_sync: Spread
    steady: Spread
    patches: int
    steady_s: float
    load_sync: float
    load_steady: float


def _cpu(replicas: list[ServiceProcess]) -> dict[int, float]:
    readings = {}
    for index, replica in enumerate(replicas):
        pid = replica.pid
        if pid is None:
            raise RuntimeError(f"replica {index} exited:\n{replica.log_tail()}")
        readings[index] = proc_figures(pid)[1]
    return readings


def _wait(replicas: list[ServiceProcess], done: Callable[[], bool], what: str) -> None:
    """Until `done()`, failing when a replica exits or after SYNC_TIMEOUT_S."""
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while not done():
        _cpu(replicas)  # raises when a replica died
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {SYNC_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def measure(workdir: Path, kubeconfig: Path, bootstrap: str, shards: int, first_seq: int) -> RunFigures:
    run_dir = workdir / f"spread-{shards}-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir()
    repo = run_dir / "remote.git"
    seed_remote(repo, list(NAMESPACES), run_dir)
    kinds = list(types_per_shard(CANDIDATES, SHARDED).values())
    replicas = []
    for index in range(REPLICAS):
        (run_dir / f"replica-{index}").mkdir()
        config = replica_config(run_dir, index, kubeconfig, bootstrap, shards)
        replicas.append(ServiceProcess(run_dir / f"replica-{index}", config, log_level="WARNING"))
    launched = time.perf_counter()
    for replica in replicas:
        ReverserProcess.start(replica)  # all at once: the plain launch, no wait for readiness
    pids = [r.pid for r in replicas]
    dealt_s: float | None = None

    def synced() -> bool:
        nonlocal dealt_s
        if dealt_s is None and dealt_out(
            asyncio.run(shard_leaders(kubeconfig, run_dir.name, shards, pids)), REPLICAS
        ):
            dealt_s = time.perf_counter() - launched
        return files_on_branches(repo) >= expected

    try:
        expected = OBJECTS * len(kinds)
        _wait(replicas, synced, f"{expected} objects on the remote")
        sync_s = time.perf_counter() - launched
        synced_cpu = _cpu(replicas)
        load_sync = os.getloadavg()[0]
        leaders_synced = asyncio.run(shard_leaders(kubeconfig, run_dir.name, shards, pids))
        time.sleep(QUIET_S)
        before = _cpu(replicas)
        mutating = time.perf_counter()
        final = asyncio.run(mutate(kubeconfig, kinds, first_seq))
        _wait(replicas, lambda: final <= seqs_on_branches(repo), "every object's last patch on the remote")
        steady_s = time.perf_counter() - mutating
        after = _cpu(replicas)
        load_steady = os.getloadavg()[0]
        leaders_steady = asyncio.run(shard_leaders(kubeconfig, run_dir.name, shards, pids))
    finally:
        with concurrent.futures.ThreadPoolExecutor(REPLICAS) as pool:
            list(pool.map(lambda r: r.stop(), replicas))
    return RunFigures(
        shards,
        leaders_synced,
        leaders_steady,
        sync_s,
        dealt_s,
        spread_of(dict.fromkeys(synced_cpu, 0.0), synced_cpu),
        spread_of(before, after),
        int(RATE * DURATION_S),
        steady_s,
        load_sync,
        load_steady,
    )


def _leaders(leaders: dict[int, int | None]) -> str:
    return ", ".join(f"shard {s} -> {'none' if r is None else f'replica-{r}'}" for s, r in leaders.items())


def _spread(label: str, spread: Spread) -> str:
    per = " / ".join(f"{s:.1f}" for s in spread.cpu_s)
    return (
        f"  {label}: CPU-s per replica {per} (total {spread.total_s:.1f}); busiest share "
        f"{spread.busiest_share:.0%}, max/min {spread.max_over_min:.2f}"
    )


def report(f: RunFigures) -> None:
    print(f"watch_shards: {f.shards}", flush=True)
    dealt = "not before the sync ended" if f.dealt_s is None else f"{f.dealt_s:.1f} s after the launch"
    print(f"  every shard held, by as many replicas as can: {dealt}")
    print(f"  leaders at the end of the first sync: {_leaders(f.leaders_synced)}")
    print(f"  leaders after the steady phase: {_leaders(f.leaders_steady)}")
    print(
        f"  all {OBJECTS * SHARDED:,} objects on the remote {f.sync_s:.1f} s after the launch "
        f"(load {f.load_sync:.1f})"
    )
    print(_spread("first sync (launch to all on the remote, imports included)", f.first_sync))
    print(
        _spread(
            f"steady ({f.patches} patches sent in {DURATION_S:.0f} s, every last one on the remote "
            f"{f.steady_s:.1f} s after the first; load {f.load_steady:.1f})",
            f.steady,
        )
    )


def compare(one: RunFigures, sharded: RunFigures) -> None:
    for label, a, b in (
        ("first sync", one.first_sync, sharded.first_sync),
        ("steady", one.steady, sharded.steady),
    ):
        print(
            f"{label}: busiest replica's share {a.busiest_share:.0%} with 1 shard, "
            f"{b.busiest_share:.0%} with {sharded.shards} "
            f"({b.busiest_share / a.busiest_share:.2f}x; even is {1 / REPLICAS:.0%}); "
            f"max/min {a.max_over_min:.2f} -> {b.max_over_min:.2f}; total CPU "
            f"{a.total_s:.1f} -> {b.total_s:.1f} s",
            flush=True,
        )
    print(
        f"time until all objects on the remote: {one.sync_s:.1f} s -> {sharded.sync_s:.1f} s; steady phase "
        f"until every last patch is on the remote: {one.steady_s:.1f} s -> {sharded.steady_s:.1f} s"
    )


def main() -> None:
    kinds = types_per_shard(CANDIDATES, SHARDED)
    print(
        f"spread: {REPLICAS} replicas, {OBJECTS} objects of each of "
        + ", ".join(f"{kind} (shard {shard})" for shard, kind in kinds.items())
        + f"; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    bootstrap, broker = kafka_bootstrap()
    with broker, tempfile.TemporaryDirectory(prefix="bench-spread-") as directory:
        workdir = Path(directory)
        plane = ControlPlane(workdir / "plane", build_binaries())
        plane.start()
        try:
            created = time.perf_counter()
            asyncio.run(create_objects(plane.kubeconfig, list(kinds.values())))
            print(
                f"  created {OBJECTS * len(kinds):,} objects in {time.perf_counter() - created:.1f} s",
                flush=True,
            )
            runs: dict[int, RunFigures] = {}  # the last run of each shard count
            asyncio.run(warm_broker(bootstrap))
            for number, shards in enumerate(ORDER):
                runs[shards] = measure(workdir, plane.kubeconfig, bootstrap, shards, 1 + number * SEQ_STRIDE)
                report(runs[shards])
        finally:
            plane.stop()
    if 1 in runs and SHARDED in runs:
        compare(runs[1], runs[SHARDED])
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
