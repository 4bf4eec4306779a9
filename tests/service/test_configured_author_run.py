"""`reverser run` for a target in configured-author mode, with no audit webhook at all.

The real CLI in its own process on the embedded log and a bare remote: a snapshot and three live
changes are on the log before the service starts (the embedded log has one owner). The grace and
the maximum wait are ten minutes, so a single resolution would hold the work past the test's
deadline: the commits arrive only because the router never asks the fact index. Every commit is
authored by the provider's committer, none by `unknown (attribution unresolved)`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource
from tests.commit.helpers import bare_remote, log_lines
from tests.conftest import started_log
from tests.e2e.service_process import ServiceProcess
from tests.support.net import free_port

WAIT_S = 60.0
TEN_MINUTES_MS = 600_000
OPS = "Ops Bot <ops@example.com>"


def _config(tmp_path: Path, remote: Path) -> dict[str, Any]:
    return {
        "workdir": str(tmp_path / "work"),
        "log": {"backend": "embedded", "fsync": False},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "attribution": {"grace_ms": TEN_MINUTES_MS, "max_wait_ms": TEN_MINUTES_MS},
        "providers": [
            {
                "name": "git",
                "url": str(remote),
                "commit_window_s": 0,
                "committer": {"name": "Ops Bot", "email": "ops@example.com"},
            }
        ],
        "targets": [
            {"name": "managed", "provider": "git", "path": "live", "attribution": "configured-author"}
        ],
    }


def _configmap(name: str, rv: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "shop", "uid": f"uid-{name}", "resourceVersion": rv}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": rv}}


async def _append_changes(settings: Settings) -> None:
    builder = WatchRecordBuilder("default", "default", "managed", "shop")
    records = [
        *builder.snapshot(GroupResource("", "configmaps"), "v1", 1, "1", [_configmap("a", "1")]),
        builder.live(WatchStep("ADDED", _configmap("b", "2"))),
        builder.live(WatchStep("MODIFIED", _configmap("b", "3"))),
        builder.live(WatchStep("DELETED", _configmap("a", "4"))),
    ]
    async with started_log(settings) as log:
        await log.create_topics(topic_specs(settings))
        await log.append_many(TopicNames.for_prefix(settings.log.topic_prefix).watch_events, records)


def test_every_change_is_committed_at_once_as_the_configured_identity(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    config = _config(tmp_path, remote)
    asyncio.run(_append_changes(Settings.model_validate(config)))
    (tmp_path / "run").mkdir()
    service = ServiceProcess(tmp_path / "run", config, log_level="INFO")
    service.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(log_lines(remote, fmt="%s") if (remote / "refs/heads/main").exists() else []) < 4:
            assert service.pid is not None, f"reverser run exited:\n{service.log_tail()}"
            assert time.monotonic() < deadline, f"not all commits on {remote}:\n{service.log_tail()}"
            time.sleep(0.2)
        # the three live events and the snapshot end went by without asking the fact index
        assert service.metric_sum("reverser_router_attribution_not_attempted_total", target="managed") == 4
        assert service.metric_sum("reverser_attribution_resolutions_total") == 0
        assert service.metric_sum("reverser_router_attribution_mode", target="managed") == 1
        assert service.metric_sum("reverser_router_attribution_mode", mode="configured-author") == 1
    finally:
        assert service.stop() == 0, service.log_tail()
    history = log_lines(remote, fmt="%an <%ae>|%s")
    assert [line.split("|")[1] for line in history][1:] == [
        "[CREATE] v1/configmaps/b",
        "[UPDATE] v1/configmaps/b",
        "[DELETE] v1/configmaps/a",
    ]
    assert {line.split("|")[0] for line in history} == {OPS}
    trailers = log_lines(remote, fmt="%(trailers:key=Reverser-Attribution,valueonly,separator=%x2c)")
    assert trailers[1:] == ["configured-author"] * 3, trailers
