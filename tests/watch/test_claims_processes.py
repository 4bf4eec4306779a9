"""Two real `reverser run` processes watch one cluster without leader election: both report it.

The processes share the real Kafka broker and watch the watch-protocol test server (served from
this test process over loopback HTTP, since no kube-apiserver is needed to show the detection).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.commit.helpers import bare_remote
from tests.conftest import unique_prefix
from tests.e2e.service_process import ServiceProcess
from tests.support.net import free_port
from tests.support.wait import wait_for
from tests.watch.kube_server import FakeKubeApiServer

pytestmark = pytest.mark.kafka


def service_config(
    workdir: Path, bootstrap: str, prefix: str, kubeconfig: Path, remote: Path
) -> dict[str, Any]:
    return {
        "workdir": str(workdir),
        "log": {"bootstrap_servers": bootstrap, "topic_prefix": prefix},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "clusters": [
            {
                "name": "src",
                "kubeconfig": str(kubeconfig),
                "leader_election": False,
                "watch_claim_interval_s": 0.5,
            }
        ],
        "providers": [{"name": "git", "url": str(remote)}],
        "targets": [
            {
                "name": "t1",
                "provider": "git",
                "cluster": "src",
                "rules": [{"resources": ["configmaps"], "namespaces": ["team-a"]}],
            }
        ],
    }


async def test_two_processes_without_election_report_each_other(
    kube: FakeKubeApiServer, kafka_bootstrap: str, tmp_path: Path
) -> None:
    kube.namespaces["team-a"] = "Active"
    kubeconfig = kube.kubeconfig(tmp_path)
    remote = bare_remote(tmp_path / "remote.git")
    prefix = unique_prefix()
    processes = []
    for name in ("one", "two"):
        workdir = tmp_path / name
        workdir.mkdir()
        processes.append(
            ServiceProcess(workdir, service_config(workdir, kafka_bootstrap, prefix, kubeconfig, remote))
        )
    try:
        for process in processes:
            await asyncio.to_thread(process.start)

        def rivals(process: ServiceProcess) -> float:
            return process.metric_sum("reverser_watch_concurrent_watchers", cluster="src")

        async def both_report() -> bool:
            counts = [await asyncio.to_thread(rivals, p) for p in processes]
            return counts == [1.0, 1.0]

        await wait_for(both_report, what="each process to report the other", timeout_s=60)
        for process in processes:
            assert process.metric_sum("reverser_watch_concurrent_watchers_detected_total", cluster="src") == 1
            assert "is also watched by" in process.log_path.read_text(errors="replace")
    finally:
        for process in processes:
            await asyncio.to_thread(process.stop)
