"""The replay-storm incident: a target's namespace is deleted mid-stream.

Upstream looped replay -> resync -> fail -> reconnect every 2 s (595 resyncs in 16 s) and starved
every other target on the branch. Here the failing stream backs off exponentially with jitter,
takes at most one snapshot per backoff step, stops for good once the namespace is gone, and the
other target on the same branch keeps flowing throughout.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import Settings
from pipeline.log.api import Log
from tests.support.wait import wait_for
from tests.watch.conftest import (
    RecordingSleep,
    fast_options,
    kinds,
    make_component,
    read_events,
    rule,
    target,
    wait_for_events,
    with_targets,
)
from tests.watch.kube_server import FakeKubeApiServer, corpus_object


def configmap(name: str, namespace: str, value: str = "1") -> dict[str, object]:
    obj = corpus_object("configmap/create-succeeds/watch.added.yaml", namespace)
    obj["metadata"]["name"] = name
    obj["data"] = {"value": value}
    return obj


async def test_deleted_namespace_backs_off_then_stops_while_others_flow(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    for index in range(3):
        kube.put(configmap(f"doomed-{index}", "doomed"))
    kube.put(configmap("steady-0", "steady"))
    config = with_targets(
        settings,
        kube.kubeconfig(tmp_path),
        target("doomed", rule("configmaps", namespaces=("doomed",)), branch="shared"),
        target("steady", rule("configmaps", namespaces=("steady",)), branch="shared"),
    )
    sleep = RecordingSleep()
    options = fast_options(config, sleep, backoff_initial_s=0.01, backoff_max_s=0.16)
    component = make_component(config, topics_log, options)
    await component.start()
    streams = {spec.stream.target: stream for spec, stream in component.manager.streams.items()}
    doomed, steady = streams["doomed"], streams["steady"]
    try:
        await wait_for(lambda: doomed.state == steady.state == "Streaming", what="both streaming")

        # The namespace starts terminating: objects go, history is compacted (the cursor is too
        # old), and every replay of it breaks off mid-way, as in the incident.
        kube.delete_namespace("doomed", finalize=False)
        kube.put(configmap("steady-1", "steady"))
        kube.compact()
        for round_ in range(8):
            kube.put(configmap("steady-0", "steady", value=f"v{round_}"))
            await wait_for(
                lambda n=round_: len(sleep.delays_s) > n,  # type: ignore[misc]
                what=f"backoff step {round_}",
            )
        await wait_for_events(
            topics_log,
            config,
            lambda evs: kinds(evs, "steady").count("MODIFIED steady-0") == 8,
            "every steady update during the incident",
        )
        kube.finalize_namespace("doomed")
        await wait_for(lambda: doomed.state == "Stopped", what="the doomed stream to stop")
        assert doomed.reason == "NamespaceGone"
        sessions, requests = doomed.sessions, len(kube.requests)
        # the positive signal: a later change on the other target of the branch is published, so the
        # manager ran well past the point where a (token-sleep) retry of the doomed stream would be
        kube.put(configmap("steady-after", "steady"))
        await wait_for_events(
            topics_log,
            config,
            lambda evs: "ADDED steady-after" in kinds(evs, "steady"),
            "a steady change after the doomed stream stopped",
        )
        assert doomed.sessions == sessions
        assert not any("/namespaces/doomed" in p for p, _ in kube.requests[requests:])
        assert steady.state == "Streaming"
        assert steady.sessions == 1
    finally:
        await component.stop()

    delays = sleep.delays_s
    steps = len(delays)
    assert doomed.snapshots_begun <= steps + 1
    assert steps >= 8, "every incident round backed off"
    assert all(0 < d <= 0.16 for d in delays)
    assert all(later > earlier for earlier, later in zip(delays[:3], delays[2:5], strict=True))
    events = await read_events(topics_log, config)
    doomed_kinds = kinds(events, "doomed")
    assert doomed_kinds[:3] == ["begin", "chunk", "end"]
    assert doomed_kinds.count("begin") == doomed.snapshots_begun
    assert doomed_kinds.count("end") == 1
    assert sorted(k for k in doomed_kinds if k.startswith("DELETED")) == [
        "DELETED doomed-0",
        "DELETED doomed-1",
        "DELETED doomed-2",
    ]
    epochs = [
        e["body"][1]["epoch"] for e in events if e["target"] == "doomed" and e["body"][0].endswith("Begin")
    ]
    assert epochs == sorted(set(epochs))
