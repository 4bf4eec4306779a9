"""Lag in seconds from a bounded history of (log-end offset, time) points, as kafka-lag-exporter does.

Each poll records the partition's log-end offset and the poll time. The time at which the log end
was at a consumer's committed offset is read off that curve (interpolated between points,
extrapolated before the oldest one), and the consumer is `now - that time` behind. Accurate to
about one poll interval, at the cost of two machine integers per point.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

__all__ = ["EndOffsetHistory"]


class EndOffsetHistory:
    """Log-end offsets of one partition over time, oldest first, at most `capacity` points.

    A run of polls that saw no new records is kept as two points (first and last time seen), so
    a burst after a quiet period is placed in time correctly rather than smeared over the quiet.
    """

    __slots__ = ("_capacity", "_points")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("history needs at least two points")
        self._capacity = capacity
        self._points = array("q")

    def __len__(self) -> int:
        return len(self._points) // 2

    def record(self, end_offset: int, now_ms: int) -> None:
        """Add the log-end offset seen at `now_ms`; a smaller end than before restarts the history."""
        points = self._points
        if points:
            last_end = points[-2]
            if end_offset < last_end:
                del points[:]
            elif end_offset == last_end and len(points) >= 4 and points[-4] == last_end:
                points[-1] = now_ms
                return
        points.extend((end_offset, now_ms))
        if len(points) > 2 * self._capacity:
            del points[:2]

    def end_at(self, at_ms: int) -> int | None:
        """The log-end offset at `at_ms`, interpolated between the polls around it.

        Used for the lag at a commit read from `__consumer_offsets`: between polls the log end
        is assumed to move evenly, so a caught-up consumer's commit is not charged with records
        appended after it. Before the first point the oldest end is used, after the last the newest.
        """
        points = self._points
        if not points:
            return None
        times = points[1::2]
        index = bisect_right(times, at_ms)
        if index == 0:
            return points[0]
        if index == len(times):
            return points[-2]
        lo_off, lo_ms = points[2 * index - 2], points[2 * index - 1]
        hi_off, hi_ms = points[2 * index], points[2 * index + 1]
        return lo_off + (hi_off - lo_off) * (at_ms - lo_ms) // (hi_ms - lo_ms)

    def lag_seconds(self, committed: int, now_ms: int) -> float | None:
        """How long ago the log end stood at `committed`; 0 when caught up, None when unknown."""
        points = self._points
        if not points:
            return None
        if committed >= points[-2]:
            return 0.0
        offsets = points[0::2]
        index = bisect_right(offsets, committed)
        if index == 0:
            if len(offsets) < 2 or offsets[-1] == offsets[0]:
                return None
            first_off, first_ms = points[0], points[1]
            rate_ms = (points[-1] - first_ms) / (offsets[-1] - first_off)
            at_ms = first_ms - (first_off - committed) * rate_ms
        else:
            lo_off, lo_ms = points[2 * index - 2], points[2 * index - 1]
            hi_off, hi_ms = points[2 * index], points[2 * index + 1]
            at_ms = lo_ms + (committed - lo_off) * (hi_ms - lo_ms) / (hi_off - lo_off)
        return max(0.0, (now_ms - at_ms) / 1000.0)
