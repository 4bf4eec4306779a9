"""One budget for the request bodies all audit requests hold at once.

The per-request limit (`max_body_bytes`) bounds one request, not the process: 256 connections each
uploading a body just under the limit, and the decoded events each body becomes (5 to 15 times its
size), would take a pod far past its memory limit. Every request therefore takes its body's bytes
from one shared budget before holding them, and gives them back once it is answered; a request
that finds the budget spent is refused at once (the ingress answers 503 with Retry-After, which
the apiserver retries) instead of waiting, so a flood never queues up more work than it admits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pipeline.audit.metrics import INFLIGHT_BODY_BYTES

__all__ = ["BodyBudget", "Reservation"]


class BodyBudget:
    """At most `max_bytes` of request bodies held by all requests together."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0

    @contextlib.contextmanager
    def reservation(self) -> Iterator[Reservation]:
        """A request's share, given back in full when the request is done, however it ends."""
        reservation = Reservation(self)
        try:
            yield reservation
        finally:
            reservation.release()

    def take(self, size: int) -> bool:
        """Hold `size` more bytes; False (nothing taken) when that would exceed `max_bytes`."""
        if self.held + size > self.max_bytes:
            return False
        self.held += size
        INFLIGHT_BODY_BYTES.inc(size)
        return True

    def give_back(self, size: int) -> None:
        self.held -= size
        INFLIGHT_BODY_BYTES.dec(size)


class Reservation:
    """The bytes one request took from the budget so far."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.size = 0

    def cover(self, size: int) -> bool:
        """Hold at least `size` bytes in all; False (nothing more taken) when the budget is spent."""
        missing = size - self.size
        if missing <= 0:
            return True
        if not self._budget.take(missing):
            return False
        self.size = size
        return True

    def release(self) -> None:
        if self.size:
            self._budget.give_back(self.size)
            self.size = 0
