"""Zombie fencing with real processes: two `reverser run` replicas on the real broker, the watch
leader frozen with SIGSTOP past its lease, a change made while it is frozen, then SIGCONT.

The frozen leader's watch connection stays open, so on SIGCONT it holds an event its successor has
already written. Its transactional producer was fenced when the successor took the cluster over,
so nothing it writes after that may appear on watch-events: every record the first leader wrote
must come before the successor's first record. Which of its tasks runs first on SIGCONT decides
whether it steps down because its lease renewal finds the successor, or because its append is
fenced (`reverser_watch_fenced_total`); the guarantee under test holds either way.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.codec import SCHEMA_HEADER
from pipeline.config import Settings
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.watch.writer import WRITER_HEADER
from tests.conftest import started_log
from tests.support.logread import read_topic
from tests.support.process import ReverserProcess, bare_remote, base_config
from tests.support.wait import wait_for
from tests.watch.conftest import kinds, read_events
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

LEASE = ("ops", "reverser-watch-src")


def replica_config(settings: Settings, workdir: Path, kubeconfig: Path, remote: Path) -> dict[str, Any]:
    return {
        **base_config(settings, workdir),
        "clusters": [
            {
                "name": "src",
                "kubeconfig": str(kubeconfig),
                "leader_election": True,
                "lease_namespace": "ops",
                "lease_duration_s": 2.0,
                "lease_renew_s": 0.2,
            }
        ],
        "providers": [{"name": "git", "url": remote.as_uri()}],
        "targets": [
            {
                "name": "t1",
                "provider": "git",
                "branch": "main",
                "path": "t1",
                "cluster": "src",
                "rules": [{"resources": ["configmaps"], "namespaces": ["team-a"]}],
            }
        ],
    }


def gauge(process: ReverserProcess, name: str, **labels: str) -> float | None:
    try:
        text = process.metrics()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def holder(kube: FakeKubeApiServer) -> str:
    lease = kube.leases.get(LEASE)
    return str((lease or {}).get("spec", {}).get("holderIdentity") or "")


@pytest.mark.parametrize("backend", ["kafka"], indirect=True)
async def test_a_leader_resumed_after_sigstop_appends_nothing_after_its_successor(
    kube: FakeKubeApiServer, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    async with started_log(settings) as log:
        await log.create_topics(topic_specs(settings))
    kubeconfig = kube.kubeconfig(tmp_path)
    remote = bare_remote(tmp_path / "remote.git")
    first = ReverserProcess(tmp_path, "first", replica_config(settings, tmp_path / "w1", kubeconfig, remote))
    second = ReverserProcess(
        tmp_path, "second", replica_config(settings, tmp_path / "w2", kubeconfig, remote)
    )
    topic = TopicNames.for_prefix(settings.log.topic_prefix).watch_events
    try:
        first.start()
        await wait_for(lambda: f"-{first.pid}-" in holder(kube), timeout_s=120, what="the first leader")
        await wait_for(
            lambda: gauge(first, "reverser_watch_leader", cluster="src") == 1.0, timeout_s=60, what="streams"
        )
        second.start()
        await wait_for(second.ready, timeout_s=120, what="the standby to be ready")

        first.signal(signal.SIGSTOP)
        await wait_for(lambda: f"-{second.pid}-" in holder(kube), timeout_s=60, what="the successor's lease")
        kube.put(corpus_object("configmap/watch-replay-collapse/watch.added.yaml", "team-a"))

        async def successor_wrote() -> bool:
            async with started_log(settings) as log:
                records = await read_topic(log, topic)
            return any(f"-{second.pid}-" in (r.header(WRITER_HEADER) or b"").decode() for r in records)

        await wait_for(successor_wrote, timeout_s=60, what="the successor to write the change")

        first.signal(signal.SIGCONT)
        # positive signal that the resumed leader went past the point where it could have written
        await wait_for(
            lambda: gauge(first, "reverser_watch_leader", cluster="src") == 0.0,
            timeout_s=60,
            what="the resumed leader to step down",
        )
        async with started_log(settings) as log:
            records = [r for r in await read_topic(log, topic) if r.header(SCHEMA_HEADER) is not None]
            events = await read_events(log, settings)
    finally:
        # Off the event loop: stopping releases the lease through the fake apiserver this loop serves.
        first_code = await asyncio.to_thread(first.stop)
        second_code = await asyncio.to_thread(second.stop)
    assert (first_code, second_code) == (0, 0), first.log_tail() + second.log_tail()
    writers = [
        "first" if f"-{first.pid}-" in w else "second"
        for w in ((r.header(WRITER_HEADER) or b"").decode() for r in records)
    ]
    handover = writers.index("second")
    assert writers[:handover] == ["first"] * handover, first.log_tail()
    assert set(writers[handover:]) == {"second"}, f"zombie records after the hand-over: {writers}"
    assert kinds(events)[handover:] == ["ADDED cm-collapse"]
