"""A routing loop that dies is told, not hidden: the router reports it (`failure()`, which makes
`reverser run` stop with exit code 1, tests/service/test_stage_failure.py) and still stops cleanly.

The death is simulated: the branch-work consumer's fetch raises an error no routing code handles,
standing in for a bug, which cannot be produced for real here.
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.router import Router
from tests.router.test_router import ScriptedLookup, destinations, prepare
from tests.support.wait import wait_for


async def test_a_routing_loop_that_dies_is_reported_and_stop_still_completes(
    any_log: Log, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = await prepare(any_log, settings)
    router = Router(any_log, topics, destinations(), ScriptedLookup({}), group_id="g-dies")
    await router.start()
    try:
        assert router.failure() is None
        consumer = router._consumer
        assert consumer is not None

        async def broken_fetch(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("simulated routing bug")

        monkeypatch.setattr(type(consumer), "fetch", broken_fetch)
        await wait_for(lambda: router.failure() is not None, what="the routing loop to die", timeout_s=30)
        assert router.failure() == "router-consume: RuntimeError('simulated routing bug')"
    finally:
        await router.stop()  # the dead loop's error does not stop the stop
