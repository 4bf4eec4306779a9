"""Late facts: an author found after the hold gave up, for a change already committed as unresolved.

The hold (`attribution.max_wait_ms`) bounds how long a change waits in its partition; a fact
can still come after it (a batch the apiserver retried with backoff, a replica that held an
accepted batch while it was paused). Such a fact is not wasted: the router keeps asking the index
for the change's fact for a while after it emitted the change, and names the author beside the
commit (docs/attribution.md, "Late facts").

Only tiers that pin the one change count after the fact: a write fact of the object's exact
(uid, resourceVersion), or the object's own deletion evidence. A name- or resourceVersion-keyed
fact that arrives late may describe a later change of the same name, and a wrong author is worse
than none; the one exception is a delete answered by name (the apiserver's audit event of a plain
delete often has no uid), which counts only when the delete was made no later than the removal was
observed (its stage time, within `LATE_NAME_MARGIN_MS`): a later incarnation's delete is stamped
after it.
"""

from __future__ import annotations

import asyncio
from typing import Final

from pipeline.attribution.index import NAME_STAMP_MARGIN_MS, FactIndex
from pipeline.attribution.model import Attribution, FactQuery, Tier

__all__ = ["LATE_NAME_MARGIN_MS", "LATE_TIERS", "await_late", "names_late"]

#: Tiers a late answer may come from: each names the change itself, not a neighbour of it.
LATE_TIERS: Final = frozenset(
    {Tier.EXACT, Tier.ADMISSION, Tier.SCALE, Tier.DELETE_STICKY, Tier.DELETECOLLECTION_BODY_UID, Tier.LATEST}
)


#: How much later than a removal's observation its name-keyed delete may be stamped (the index's
#: rule for any fact found by name).
LATE_NAME_MARGIN_MS: Final = NAME_STAMP_MARGIN_MS


def names_late(found: Attribution, query: FactQuery) -> bool:
    """Whether a lookup made after the hold may name the author of a change committed as unresolved.

    A conflict names no one (as it would have during the hold); a removal answered by a `latest`
    slot is answered only by a delete there (the index's own rule), so it pins the deletion too. A
    removal answered by name needs a delete stamped no later than the removal was observed.
    """
    fact = found.fact
    if fact is None:
        return False
    if found.tier in LATE_TIERS:
        return True
    return (
        found.tier == Tier.NAME
        and not query.exact_capable
        and query.event_ms > 0
        and 0 < fact.stage_ms <= query.event_ms + LATE_NAME_MARGIN_MS
    )


async def await_late(index: FactIndex, query: FactQuery, window_s: float) -> Attribution | None:
    """The late answer for `query` once a fact pins it, or None when none came within `window_s`.

    Waits on the same keys a live resolution registers, so a filed fact wakes it at once; the wake
    flag is cleared before each lookup, so a fact filed during a lookup wakes it again.
    """
    waiter = index.register(query)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window_s
        while True:
            waiter.event.clear()
            found = index.lookup(query)
            if names_late(found, query):
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                async with asyncio.timeout(remaining):
                    await waiter.event.wait()
            except TimeoutError:
                return None
    finally:
        index.unregister(waiter)
