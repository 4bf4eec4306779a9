"""The router holds a bounded number of bytes of consumed records, whatever its `max_in_flight`.

`max_in_flight` counts records: 2,000 snapshot chunks of up to 4 MiB each were a whole first
sync's collection, decoded and held ahead of the emitter (issue 32's memory budget). The byte
bound is lowered here so that a few small live events show it; every event is still routed, in
order. On the embedded log, no clock involved.
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.router import Router
from pipeline.router import router as router_module
from tests.router.test_router import added, destinations, prepare, read_work
from tests.support.wait import wait_for

OBJECTS = 12


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_router_holds_at_most_its_byte_bound_of_records(
    any_log: Log, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = await prepare(any_log, settings)
    records = added(f"cm-{n:02d}" for n in range(OBJECTS))
    largest = max(len(r.value or b"") for r in records)
    bound = 2 * largest + 1  # room for two records, never three
    monkeypatch.setattr(router_module, "MAX_HELD_BYTES", bound)
    await any_log.append_many(topics.watch_events, records)
    router = Router(any_log, topics, destinations(), None, group_id="g-held")
    held: list[int] = []
    admit = router._admit

    def noted_admit(record: Any) -> Any:
        held.append(router._held_bytes)
        return admit(record)

    monkeypatch.setattr(router, "_admit", noted_admit)
    await router.start()
    try:
        items = await read_work(any_log, topics.branch_work, OBJECTS)
        # every record's bytes are given back once its transaction is committed
        await wait_for(lambda: router._held_bytes == 0, "the router to give back what it held")
    finally:
        await router.stop()
    assert [item["body"][1]["name"] for item in items] == [f"cm-{n:02d}" for n in range(OBJECTS)]
    assert len(held) == OBJECTS
    assert max(held) <= bound
