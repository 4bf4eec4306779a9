"""Property: whatever the server does (writes, deletes, dropped connections, compaction, restarts
of the watcher), folding the log the way the commit worker does ends in the server's state.

The fold is the consumer contract: a snapshot replaces the scope's state at its end marker (mark
and sweep); a snapshot without an end marker is superseded by the next epoch; live events apply
in order. Runs on the embedded log (each example gets a fresh one).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import LogSettings, Settings
from pipeline.log import open_log
from pipeline.log.api import Log
from pipeline.log.topics import topic_specs
from pipeline.watch.component import WatchComponent
from tests.support.wait import wait_for
from tests.watch.conftest import (
    fast_options,
    make_component,
    read_events,
    rule,
    target,
    with_targets,
)
from tests.watch.kube_server import FakeKubeApiServer

NAMES = ("a", "b", "c")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(NAMES), st.integers(0, 2)),
        st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(0)),
        st.tuples(st.just("drop"), st.just(""), st.just(0)),
        st.tuples(st.just("compact"), st.just(""), st.just(0)),
        st.tuples(st.just("restart"), st.just(""), st.just(0)),
    ),
    max_size=14,
)


def fold(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    state: dict[str, dict[str, Any]] = {}
    pending: dict[str, dict[str, Any]] | None = None
    epoch = -1
    for event in events:
        kind, body = event["body"]
        if kind.endswith("SnapshotBegin"):
            assert body["epoch"] > epoch, "epochs must increase"
            epoch, pending = body["epoch"], {}
        elif kind.endswith("SnapshotChunk"):
            assert pending is not None
            assert body["epoch"] == epoch
            for obj in body["objects"]:
                pending[obj["name"]] = json.loads(obj["object"])["data"]
        elif kind.endswith("SnapshotEnd"):
            assert pending is not None
            assert body["epoch"] == epoch
            state, pending = pending, None
        elif body["type"] == "DELETED":
            state.pop(body["name"], None)
        else:
            state[body["name"]] = json.loads(body["object"])["data"]
    return state


async def caught_up(component: WatchComponent, kube: FakeKubeApiServer) -> bool:
    (stream,) = component.manager.streams.values()
    if stream.state != "Streaming":
        return False
    if stream.resource_version != str(kube.rv):
        kube.bookmark()
        return False
    return True


async def run_scenario(steps: list[tuple[str, str, int]], workdir: Path) -> None:
    kube = FakeKubeApiServer()
    await kube.start()
    kube.namespaces["ns"] = "Active"
    base = Settings(workdir=workdir, log=LogSettings(backend="embedded", topic_prefix="prop"))
    config = with_targets(
        base, kube.kubeconfig(workdir), target("t1", rule("configmaps", namespaces=("ns",)))
    )
    log: Log = open_log(config)
    await log.start()
    component: WatchComponent | None = None
    try:
        await log.create_topics(topic_specs(config))
        component = make_component(config, log, fast_options(config))
        await component.start()
        for op, name, value in steps:
            if op == "put":
                kube.put(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": "ns"},
                        "data": {"v": str(value)},
                    }
                )
            elif op == "delete" and (("ns", name) in kube.objects[("", "configmaps")]):
                kube.delete(("v1", "ConfigMap"), "ns", name)
            elif op == "drop":
                kube.drop_connections()
            elif op == "compact":
                kube.compact()
                kube.drop_connections()
            elif op == "restart":
                await component.stop()
                component = make_component(config, log, fast_options(config))
                await component.start()
        current = component
        await wait_for(lambda: caught_up(current, kube), what="the stream to catch up")
        await component.stop()
        component = None
        expected = {name: obj["data"] for (_, name), obj in kube.objects[("", "configmaps")].items()}
        assert fold(await read_events(log, config)) == expected
    finally:
        if component is not None:
            await component.stop()
        await log.close()
        await kube.stop()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=operations)
async def test_folding_the_log_reproduces_the_server_state(steps: list[tuple[str, str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await run_scenario(steps, Path(tmp))
