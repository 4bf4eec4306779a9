"""Event-time watermarks of the fact stream per audit route, and the hold rule built on them.

The watch event of a change usually arrives before the audit batch that explains it; after a
restart or an ingress outage the apiserver retries that batch with a growing backoff, so the wait
cannot be a fixed wall-clock grace. The audit side's progress is measured instead: a route's
watermark is the newest `stageTimestamp` among the facts filed for it, i.e. how far that
apiserver's audit time has advanced in what this process has read. A resolution that found no
satisfying fact is held until the watermark has passed the event's time by the reorder allowance
(a fact for the event would have arrived by then), never less than the grace and never more than
the maximum wait (which covers the apiserver's retry horizon). The allowance exists because audit
time does not advance in order: the apiserver sends its batches concurrently, so a batch held by a
paused replica, or retried after a failure, arrives after later batches that went through other
replicas and already moved the watermark. Pure: no clock, no I/O (see docs/attribution.md).
"""

from __future__ import annotations

__all__ = ["Watermarks", "hold_s"]


class Watermarks:
    """The newest audit event time (ms) seen per route; never goes backwards."""

    __slots__ = ("_by_route",)

    def __init__(self) -> None:
        self._by_route: dict[str, int] = {}

    def advance(self, route: str, event_ms: int) -> bool:
        """Take a fact's event time into account; True when the route's watermark moved forward."""
        if event_ms > self._by_route.get(route, 0):
            self._by_route[route] = event_ms
            return True
        return False

    def of(self, route: str) -> int:
        """The route's watermark in ms since the epoch; 0 before any fact with a time was seen."""
        return self._by_route.get(route, 0)

    def passed(self, route: str, event_ms: int) -> bool:
        """Whether audit time on the route has reached `event_ms`."""
        return self.of(route) >= event_ms


def hold_s(
    waited_s: float, grace_s: float, max_wait_s: float, event_ms: int, watermark_ms: int, reorder_ms: int
) -> float:
    """How much longer a resolution without a settling fact waits (0: settle now).

    It waits out the grace in any case; after that only while the event's time is known
    (`event_ms > 0`) and the watermark has not passed it by `reorder_ms`; never past
    `max(grace, max_wait)`.
    """
    limit = max(grace_s, max_wait_s)
    if waited_s >= limit:
        return 0.0
    if waited_s < grace_s:
        return grace_s - waited_s
    if event_ms <= 0 or watermark_ms >= event_ms + reorder_ms:
        return 0.0
    return limit - waited_s
