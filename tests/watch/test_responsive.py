"""A large snapshot neither holds the event loop nor the whole collection in memory.

The LIST fallback reads one page at a time and appends that page's chunks before it asks for the
next page (so memory holds a page, not the collection); the watch path gives the loop back every
`slice_ms` (`pipeline.slices`, tested in tests/unit/test_slices.py). Runs against the
watch-protocol test server and the real log backends.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pipeline.config import Settings
from pipeline.log.api import Log, PendingRecord
from tests.watch.conftest import (
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


class _Timeline:
    """The log, with every append noted on the test server's request list (one shared timeline)."""

    def __init__(self, log: Log, kube: FakeKubeApiServer) -> None:
        self._log = log
        self._kube = kube

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> object:
        if topic.endswith("watch-events"):
            self._kube.requests.append(("APPEND", {"records": str(len(records))}))
        return await self._log.append_many(topic, records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


async def test_a_list_snapshot_is_appended_page_by_page(
    kube: FakeKubeApiServer, topics_log: Log, settings: Settings, tmp_path: Path
) -> None:
    kube.reject_watchlist = True
    base = corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a")
    for n in range(10):
        obj = copy.deepcopy(base)
        obj["metadata"]["name"] = f"cm-{n}"
        obj["data"] = {"blob": "x" * 3000}
        kube.put(obj)
    config = with_targets(
        settings, kube.kubeconfig(tmp_path), target("t1", rule("configmaps", namespaces=("team-a",)))
    )
    # a chunk budget of one object (3 KB of data, 5,000 bytes of objects per chunk): every page
    # fills chunks of its own
    options = fast_options(config, list_page_size=3, max_record_bytes=4096 + 5000)
    component = make_component(config, cast(Log, _Timeline(topics_log, kube)), options)
    await component.start()
    try:
        events = await wait_for_events(topics_log, config, lambda evs: "end" in kinds(evs), "snapshot end")
    finally:
        await component.stop()
    objects = [o["name"] for e in events if kinds([e]) == ["chunk"] for o in e["body"][1]["objects"]]
    assert sorted(objects) == [f"cm-{n}" for n in range(10)]
    # the first LIST is the probe for the collection's version that marks a first snapshot's baseline
    probe, *pages = [q for p, q in kube.requests if p.endswith("/configmaps") and "watch" not in q]
    assert probe == {"limit": "1"}
    timeline = [
        "APPEND" if path == "APPEND" else "LIST"
        for path, query in kube.requests
        if path == "APPEND" or (path.endswith("/configmaps") and "watch" not in query and query is not probe)
    ]
    assert [q.get("limit") for q in pages] == ["3"] * 4
    assert [bool(q.get("continue")) for q in pages] == [False, True, True, True]
    # each page is written before the next is asked for: no two LIST requests back to back
    assert "LIST,LIST" not in ",".join(timeline)
    assert len(await read_events(topics_log, config)) == len(events)
