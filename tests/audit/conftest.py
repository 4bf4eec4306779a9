"""A real audit ingress on loopback over a real log, and reading its records back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from pipeline.audit.server import AuditIngress
from pipeline.codec import FACT_BATCH, SCHEMA_HEADER, codec
from pipeline.codec.fact_batch import FactBatch
from pipeline.config import AuditSettings, LogSettings, Settings, TopicSettings
from pipeline.log.api import Log, Record, TopicPartition
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.topics import TopicNames, topic_specs
from tests.conftest import unique_prefix
from tests.support.logread import read_topic

T = TypeVar("T")


def ingress_settings(
    workdir: Path,
    *,
    log: LogSettings | None = None,
    max_message_bytes: int | None = None,
    **audit: Any,
) -> Settings:
    """Settings for one ingress on an ephemeral loopback port."""
    log_settings = log or LogSettings(backend="embedded", topic_prefix=unique_prefix())
    if max_message_bytes is not None:
        log_settings = log_settings.model_copy(
            update={"topics": TopicSettings(max_message_bytes=max_message_bytes)}
        )
    audit.setdefault("addr", "127.0.0.1:0")
    return Settings(workdir=workdir, log=log_settings, audit=AuditSettings(**audit))


async def open_embedded(settings: Settings) -> EmbeddedLog:
    log = EmbeddedLog(settings.workdir / "log")
    await log.start()
    await log.create_topics(topic_specs(settings))
    return log


class Running:
    """A started ingress and the log behind it."""

    def __init__(self, ingress: AuditIngress, log: Log, settings: Settings) -> None:
        self.ingress = ingress
        self.log = log
        self.settings = settings
        self.topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts

    def url(self, path: str = "/audit-webhook/default") -> str:
        return f"{self.ingress.scheme}://127.0.0.1:{self.ingress.port}{path}"


@pytest.fixture
async def start_ingress(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """`await start_ingress(**audit_settings)` → Running, stopped after the test."""
    started: list[tuple[AuditIngress, Log]] = []

    async def start(**kwargs: Any) -> Running:
        settings = ingress_settings(tmp_path / f"w{len(started)}", **kwargs)
        log = await open_embedded(settings)
        ingress = AuditIngress(settings, log)
        await ingress.start()
        started.append((ingress, log))
        return Running(ingress, log, settings)

    yield start
    for ingress, log in reversed(started):
        await ingress.stop()
        await log.close()


@pytest.fixture
async def running(start_ingress: Callable[..., Any]) -> Running:
    result: Running = await start_ingress()
    return result


def decode_batch(record: Record) -> FactBatch:
    return FactBatch.from_avro(codec(FACT_BATCH).decode(record.value, record.header(SCHEMA_HEADER)))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A client session for posting to the ingress, closed after the test."""
    async with aiohttp.ClientSession() as session:
        yield session


async def read_batches(running: Running) -> list[tuple[bytes | None, FactBatch]]:
    return [(r.key, decode_batch(r)) for r in await read_topic(running.log, running.topic)]


class ThreadedIngress:
    """An ingress + embedded log on their own event loop thread, for synchronous (hypothesis) tests."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="audit-ingress", daemon=True)
        self.ingress: AuditIngress | None = None
        self.log: EmbeddedLog | None = None

    def __enter__(self) -> ThreadedIngress:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        return self

    async def _start(self) -> None:
        self.log = await open_embedded(self.settings)
        self.ingress = AuditIngress(self.settings, self.log)
        await self.ingress.start()

    async def _stop(self) -> None:
        if self.ingress is not None:
            await self.ingress.stop()
        if self.log is not None:
            await self.log.close()

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()

    @property
    def port(self) -> int:
        assert self.ingress is not None
        assert self.ingress.port is not None
        return self.ingress.port

    @property
    def topic(self) -> str:
        return TopicNames.for_prefix(self.settings.log.topic_prefix).audit_facts

    def ends(self) -> dict[int, int]:
        """The facts topic's end offset per partition now: a mark for `published_after`."""
        return self._call(self._ends())

    def published_after(self, ends: dict[int, int]) -> list[FactBatch]:
        """The fact batches appended since `ends` was taken, in log order per partition."""
        assert self.log is not None
        records = self._call(read_topic(self.log, self.topic))
        return [decode_batch(r) for r in records if r.offset >= ends.get(r.partition, 0)]

    async def _ends(self) -> dict[int, int]:
        assert self.log is not None
        count = await self.log.partitions_for(self.topic)
        ends = await self.log.end_offsets([TopicPartition(self.topic, p) for p in range(count)])
        return {tp.partition: end for tp, end in ends.items()}

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


@pytest.fixture(scope="module")
def threaded_ingress(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedIngress]:
    settings = ingress_settings(tmp_path_factory.mktemp("threaded"), max_body_bytes=256 * 1024)
    with ThreadedIngress(settings) as server:
        yield server
