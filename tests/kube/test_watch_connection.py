"""An open watch skips undecodable lines and tells its caller, which owns the count.

The client sits below the stages and keeps no stage's metric: the watch stage passes
`on_undecodable` (tests/watch/test_recovery.py checks its `reverser_watch_events_dropped_total`).
Against the watch-protocol test server over real HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import ClusterSettings
from pipeline.kube import client as client_module
from pipeline.kube.client import BATCH_LINES, KubeClient, WatchConnection, open_client
from tests.support.wait import wait_for
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

_PATH = "/api/v1/namespaces/default/configmaps"


def configmap(name: str) -> dict[str, Any]:
    obj = corpus_object("configmap/create-succeeds/watch.added.yaml", "default")
    obj["metadata"]["name"] = name
    return obj


async def events_until(connection: WatchConnection, name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async for event in connection.events():
        events.append(event)
        if event["object"].get("metadata", {}).get("name") == name:
            break
    return events


async def watch_with_garbage(
    kube: FakeKubeApiServer, client: KubeClient, connection: WatchConnection
) -> list[dict[str, Any]]:
    await wait_for(lambda: kube.watch_count == 1, what="the watch to open")
    kube.inject_raw(b'{"type": "MODIFIED", "object": {"metadata": \n')
    kube.inject_raw(b'{"type": "ADDED"}\n')
    kube.inject_raw(b"\n")
    kube.put(configmap("cm-b"))
    try:
        return await events_until(connection, "cm-b")
    finally:
        connection.close()
        await client.close()


async def test_undecodable_lines_are_skipped_and_reported_once_each(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    skipped: list[None] = []
    connection = await client.watch(_PATH, [], 30.0, lambda: skipped.append(None))
    events = await watch_with_garbage(kube, client, connection)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "cm-b")]
    assert len(skipped) == 2  # the broken JSON and the event without an object; not the blank line


async def test_a_caller_without_a_callback_still_reads_past_them(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    connection = await client.watch(_PATH, [], 30.0)
    events = await watch_with_garbage(kube, client, connection)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "cm-b")]


async def test_batches_hold_each_read_s_lines_in_order_across_split_reads(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A line cut between two network writes is joined; a write of several lines comes out as
    events in server order; a blank line and a line of whitespace are no events."""
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    connection = await client.watch(_PATH, [], 30.0)
    try:
        await wait_for(lambda: kube.watch_count == 1, what="the watch to open")
        line = json.dumps({"type": "ADDED", "object": configmap("cm-x")}).encode()
        second = json.dumps({"type": "ADDED", "object": configmap("cm-y")}).encode()
        kube.inject_raw(line[:40])
        kube.inject_raw(line[40:] + b"\n" + second + b"\n \t\r\n\n")
        kube.put(configmap("cm-z"))
        batches: list[list[dict[str, Any]]] = []
        async for batch in connection.batches():
            batches.append(batch)
            if batch[-1]["object"]["metadata"]["name"] == "cm-z":
                break
    finally:
        connection.close()
        await client.close()
    assert all(batches)
    names = [event["object"]["metadata"]["name"] for batch in batches for event in batch]
    assert names == ["cm-x", "cm-y", "cm-z"]


def _added(name: str) -> bytes:
    return json.dumps({"type": "ADDED", "object": {"metadata": {"name": name}}}).encode() + b"\n"


async def _read_batches(
    kube: FakeKubeApiServer, tmp_path: Path, names: list[str]
) -> list[list[dict[str, Any]]]:
    """Open a watch, write one ADDED line per name in one go, and read parts until the last name."""
    client = await open_client(ClusterSettings(name="src", kubeconfig=kube.kubeconfig(tmp_path)))
    connection = await client.watch(_PATH, [], 30.0)
    batches: list[list[dict[str, Any]]] = []
    try:
        await wait_for(lambda: kube.watch_count == 1, what="the watch to open")
        kube.inject_raw(b"".join(_added(name) for name in names))
        async for batch in connection.batches():
            batches.append(batch)
            if batch[-1]["object"]["metadata"]["name"] == names[-1]:
                break
    finally:
        connection.close()
        await client.close()
    return batches


async def test_a_long_read_is_decoded_a_part_at_a_time(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """250 short lines in one write arrive in one read; no part handed on holds more than
    `BATCH_LINES` events, and together they are every event in order."""
    names = [f"cm-{n:03d}" for n in range(250)]
    batches = await _read_batches(kube, tmp_path, names)
    assert all(0 < len(batch) <= BATCH_LINES for batch in batches)
    assert [event["object"]["metadata"]["name"] for batch in batches for event in batch] == names


async def test_a_read_takes_at_most_read_bytes_and_lines_may_span_reads(
    kube: FakeKubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's megabytes were joined into one buffer and split into lines at once; a read now
    takes at most `READ_BYTES` (lowered here), so a part holds the lines of one such read, and a
    line cut between two reads is whole again."""
    monkeypatch.setattr(client_module, "READ_BYTES", 1000)
    names = [f"cm-{n:03d}" for n in range(250)]
    batches = await _read_batches(kube, tmp_path, names)
    assert [event["object"]["metadata"]["name"] for batch in batches for event in batch] == names
    assert max(len(batch) for batch in batches) <= 1000 // len(_added(names[0])) + 1
