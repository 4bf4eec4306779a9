"""Fixtures for watch ingestion: the watch-protocol test server and a log with the topics created."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, codec
from pipeline.config import ClusterSettings, ProviderSettings, Settings, TargetSettings, WatchRule
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.watch.component import WatchComponent
from pipeline.watch.stream import StreamOptions
from tests.support.logread import read_topic
from tests.support.wait import wait_for
from tests.watch.kube_server import FakeKubeApiServer, running_server


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApiServer]:
    async with running_server() as server:
        yield server


@pytest.fixture
async def topics_log(any_log: Log, settings: Settings) -> Log:
    await any_log.create_topics(topic_specs(settings))
    return any_log


def target(name: str, *rules: WatchRule, cluster: str = "src", branch: str = "main") -> TargetSettings:
    return TargetSettings(
        name=name, provider="git", branch=branch, path=name, cluster=cluster, rules=list(rules)
    )


def rule(
    *resources: str, namespaces: tuple[str, ...] = (), cluster_wide: bool = False, selector: str = ""
) -> WatchRule:
    return WatchRule(
        resources=list(resources),
        namespaces=list(namespaces),
        cluster_wide=cluster_wide,
        label_selector=selector,
    )


def with_targets(settings: Settings, kubeconfig: Path, *targets: TargetSettings) -> Settings:
    """`settings` (log, workdir) plus one source cluster, one provider and the given targets."""
    return settings.model_copy(
        update={
            "clusters": [ClusterSettings(name="src", kubeconfig=kubeconfig)],
            "providers": [ProviderSettings(name="git", url="file:///dev/null")],
            "targets": list(targets),
        }
    )


class RecordingSleep:
    """Records every backoff delay asked for and sleeps only a token amount, so tests run fast."""

    def __init__(self) -> None:
        self.delays_s: list[float] = []

    async def __call__(self, delay_s: float) -> None:
        self.delays_s.append(delay_s)
        await asyncio.sleep(0.005)


def fast_options(settings: Settings, sleep: RecordingSleep | None = None, **overrides: Any) -> StreamOptions:
    values: dict[str, Any] = {
        "max_record_bytes": settings.log.topics.max_message_bytes,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.2,
        "sleep": sleep or RecordingSleep(),
        "rng": random.Random(7),
        "watch_timeout_s": 30,
    }
    values.update(overrides)
    return StreamOptions(**values)


def make_component(settings: Settings, log: Log, options: StreamOptions) -> WatchComponent:
    return WatchComponent(settings, log, options=options)


async def read_events(log: Log, settings: Settings) -> list[dict[str, Any]]:
    """Every watch-events record decoded, in log order per partition, with `_key`/`_headers` added."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).watch_events
    watch_codec = codec(WATCH_EVENT)
    out: list[dict[str, Any]] = []
    for record in await read_topic(log, topic):
        decoded = watch_codec.decode(record.value, record.header(SCHEMA_HEADER))
        decoded["_key"] = record.key
        decoded["_headers"] = dict(record.headers)
        out.append(decoded)
    return out


def carriers(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Object name -> the first record that carries it: its live event or, when a new owner had to
    take a snapshot (a loaded host can lose a Lease before a cursor was written), its chunk."""
    found: dict[str, dict[str, Any]] = {}
    for event in events:
        kind, body = event["body"]
        if kind.endswith("SnapshotChunk"):
            names = [item["name"] for item in body["objects"]]
        elif "name" in body:
            names = [body["name"]]
        else:
            names = []
        for name in names:
            found.setdefault(name, event)
    return found


def kinds(
    events: list[dict[str, Any]], target_name: str | None = None, scope: str | None = None
) -> list[str]:
    """Compact view of records: `begin`, `chunk`, `end`, or `<TYPE> <name>` for live events."""
    out = []
    for event in events:
        if target_name is not None and event["target"] != target_name:
            continue
        if scope is not None and event["scope"] != scope:
            continue
        name, body = event["body"]
        if name.endswith("SnapshotBegin"):
            out.append("begin")
        elif name.endswith("SnapshotChunk"):
            out.append("chunk")
        elif name.endswith("SnapshotEnd"):
            out.append("end")
        else:
            out.append(f"{body['type']} {body['name']}")
    return out


async def wait_for_events(
    log: Log, settings: Settings, predicate: Callable[[list[dict[str, Any]]], bool], what: str
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def check() -> bool:
        nonlocal found
        found = await read_events(log, settings)
        return predicate(found)

    await wait_for(check, what=what)
    return found


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0
