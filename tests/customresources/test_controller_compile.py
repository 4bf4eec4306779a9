"""The controller compiles off the event loop, and a tenant's oversized object never stops a version.

Without an apiserver: `_publish` is driven with an in-memory object list and a writer that keeps
what it is given. The compile is made to wait until the loop has run, which only returns if the
compile is not on the loop itself (issue 27: a 34 s glob froze the webhook, /healthz, the commit
worker and the Lease).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.customresources import controller as controller_module
from pipeline.customresources.compile import CompiledConfig
from pipeline.customresources.controller import ConfigController
from pipeline.customresources.objects import CustomResource, Kind, ObjectRef, parse_object
from pipeline.customresources.state import decode_state
from pipeline.log.api import PendingRecord, Record
from pipeline.log.topics import TopicNames
from tests.customresources.test_tenancy import GRANT, HOME, PLATFORM_URL, _huge_rule, _provider, _target

SETTINGS = Settings(clusters=[{"name": "default"}], custom_resources={"enabled": True, "tenants": [GRANT]})
CONFIG_TOPIC = TopicNames.for_prefix(SETTINGS.log.topic_prefix).config


class _Objects:
    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self._objects = [parse_object(d) for d in documents]

    def objects(self) -> list[CustomResource]:
        return list(self._objects)


class _Writer:
    def __init__(self) -> None:
        self.appended: list[Mapping[str, Sequence[PendingRecord]]] = []

    async def append_topics(self, appends: Mapping[str, Sequence[PendingRecord]]) -> object:
        self.appended.append(appends)
        return None


def _published(writer: _Writer) -> CompiledConfig:
    (appends,) = writer.appended
    (pending,) = appends[CONFIG_TOPIC]
    record = Record(CONFIG_TOPIC, 0, 0, 0, pending.key, pending.value, pending.headers)
    return decode_state(record).compiled


def _controller() -> tuple[ConfigController, _Writer]:
    controller = ConfigController(SETTINGS, log_=None, identity="test")  # type: ignore[arg-type]
    writer = _Writer()
    controller._writer = writer  # type: ignore[assignment]
    return controller, writer


PLATFORM = [_provider(HOME, PLATFORM_URL), _target(HOME, "prod", "clusters/prod")]


async def test_the_compile_runs_while_the_loop_keeps_running(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_ran = threading.Event()
    seen: dict[str, Any] = {}
    compile_for_real = controller_module.publishable  # type: ignore[attr-defined]

    def compile_after_the_loop_ran(objects: list[CustomResource], **kwargs: Any) -> CompiledConfig:
        seen["thread"] = threading.current_thread()
        seen["loop ran meanwhile"] = loop_ran.wait(timeout=30)
        return compile_for_real(objects, **kwargs)

    monkeypatch.setattr(controller_module, "publishable", compile_after_the_loop_ran)

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(0.01)
            loop_ran.set()

    controller, writer = _controller()
    beating = asyncio.create_task(heartbeat())
    try:
        await controller._publish(_Objects(PLATFORM), None)  # type: ignore[arg-type]
    finally:
        beating.cancel()
    assert seen["thread"] is not threading.main_thread()
    assert seen["loop ran meanwhile"], "the compile blocked the event loop"
    assert [t.name for t in _published(writer).targets] == ["prod"]


async def test_an_oversized_tenant_rule_is_its_own_error_and_the_version_is_published() -> None:
    tenant = [_provider(), _target(), _huge_rule()]
    controller, writer = _controller()
    await controller._publish(_Objects([*PLATFORM, *tenant]), None)  # type: ignore[arg-type]
    compiled = _published(writer)
    assert [t.name for t in compiled.targets] == ["prod", "team-a/apps"]
    huge = compiled.reports[ObjectRef(Kind.WATCH_RULE, "team-a", "huge")]
    assert not huge.accepted
    assert controller.published is not None
    assert controller.published.version == 1
    # the same objects again publish nothing new
    await controller._publish(_Objects([*PLATFORM, *tenant]), None)  # type: ignore[arg-type]
    assert len(writer.appended) == 1
