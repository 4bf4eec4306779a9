"""Per-group lag-seconds limits: the first configured pattern that matches a group gives its limit.

Burrow's statuses need no thresholds, but an operator often knows that one group may be an hour
behind (a nightly batch) while another must stay within seconds; the limit makes that explicit
and alertable (`reverser_consumergroup_over_threshold`, exit code 1 of `reverser lag`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipeline.config import LagThreshold

__all__ = ["LagThresholds"]


class LagThresholds:
    """Compiled (pattern, limit) pairs; lookups are cached per group name (selected groups only)."""

    __slots__ = ("_cache", "_rules")

    def __init__(self, thresholds: Iterable[LagThreshold]) -> None:
        self._rules = tuple((re.compile(t.group), t.max_lag_s) for t in thresholds)
        self._cache: dict[str, float | None] = {}

    def limit_for(self, group: str) -> float | None:
        """The lag-seconds limit of `group`, or None when no pattern matches it."""
        if group in self._cache:
            return self._cache[group]
        limit = next((max_s for pattern, max_s in self._rules if pattern.search(group)), None)
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[group] = limit
        return limit
