"""Lag in seconds from a bounded history of log-end offsets per poll, as kafka-lag-exporter does.

Each poll records every partition's log-end offset at one poll time. The time at which the log
end was at a consumer's committed offset is read off that curve (interpolated between polls,
extrapolated before the oldest one), and the consumer is `now - that time` behind. Accurate to
about one poll interval.

Every partition is recorded at every poll, so the poll times are shared: they are kept once (the
timeline), and a partition keeps only its log-end offsets, as 32-bit steps from its oldest
offset, in 16-bit words while every step fits (under 65,536 records per poll) and 32-bit words
from the first step that does not. That is two or four bytes per point and partition instead of
sixteen for (offset, time) pairs.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Mapping
from itertools import accumulate

from pipeline.log.api import TopicPartition

__all__ = ["EndOffsetHistories"]

_STEP_LIMIT = 1 << 32  # one poll's growth must fit a 32-bit step; larger restarts the history
_NARROW_LIMIT = 1 << 16  # steps below this fit the 16-bit layout
_BASE_WORDS = 4  # the oldest offset as four 16-bit words, in either layout
_COUNT = 4
_STEPS = 5


class EndOffsetHistories:
    """Log-end offsets of every live partition at each of the last `capacity` polls.

    Per partition one array of 16-bit (or, once a step needs it, 32-bit) words, allocated at its
    full size once: the oldest offset (four 16-bit words), the number of points, then the steps
    between consecutive polls.

    A partition's points are the newest polls of the timeline (it may have fewer than the
    timeline when it appeared later or restarted). A log end smaller than before (topic
    recreated) or a jump of 2^32 records within one poll restarts that partition's history.
    """

    __slots__ = ("_capacity", "_ends", "_times")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("history needs at least two points")
        self._capacity = capacity
        self._times = array("q")
        self._ends: dict[TopicPartition, array[int]] = {}

    def __contains__(self, tp: object) -> bool:
        return tp in self._ends

    def __len__(self) -> int:
        return len(self._ends)

    def points(self, tp: TopicPartition) -> int:
        """How many polls `tp` has; 0 when unknown."""
        steps = self._ends.get(tp)
        return 0 if steps is None else int(steps[_COUNT])

    def record(self, ends: Mapping[TopicPartition, int], now_ms: int) -> None:
        """Add one poll: the log-end offset of every live partition; partitions not in `ends` are dropped."""
        capacity = self._capacity
        times = self._times
        times.append(now_ms)
        if len(times) > capacity:
            del times[0]
        histories = self._ends
        if len(histories) > len(ends) or any(tp not in ends for tp in histories):
            for tp in [tp for tp in histories if tp not in ends]:
                del histories[tp]
        for tp, end in ends.items():
            steps = histories.get(tp)
            if steps is None:
                histories[tp] = self._start(end)
                continue
            count = int(steps[_COUNT])
            step = end - _base(steps) - sum(steps[_STEPS : _STEPS + count - 1])
            if not 0 <= step < _STEP_LIMIT:
                histories[tp] = self._start(end)
                continue
            if step >= _NARROW_LIMIT and steps.typecode == "H":
                steps = histories[tp] = array("I", steps)
            if count == capacity:
                _set_base(steps, _base(steps) + steps[_STEPS])
                steps[_STEPS:-1] = steps[_STEPS + 1 :]
                count -= 1
            steps[_STEPS + count - 1] = step
            steps[_COUNT] = count + 1

    def end_at(self, tp: TopicPartition, at_ms: int) -> int | None:
        """The log-end offset of `tp` at `at_ms`, interpolated between the polls around it.

        Used for the lag at a commit read from `__consumer_offsets`: between polls the log end is
        assumed to move evenly, so a caught-up consumer's commit is not charged with records
        appended after it. Before the first point the oldest end is used, after the last the newest.
        """
        curve = self._curve(tp)
        if curve is None:
            return None
        offsets, times = curve
        index = bisect_right(times, at_ms)
        if index == 0:
            return offsets[0]
        if index == len(times):
            return offsets[-1]
        lo_off, lo_ms = offsets[index - 1], times[index - 1]
        hi_off, hi_ms = offsets[index], times[index]
        return lo_off + (hi_off - lo_off) * (at_ms - lo_ms) // (hi_ms - lo_ms)

    def lag_seconds(self, tp: TopicPartition, committed: int, now_ms: int) -> float | None:
        """How long ago the log end of `tp` stood at `committed`; 0 when caught up, None when unknown."""
        curve = self._curve(tp)
        if curve is None:
            return None
        offsets, times = curve
        if committed >= offsets[-1]:
            return 0.0
        index = bisect_right(offsets, committed)
        if index == 0:
            if len(offsets) < 2 or offsets[-1] == offsets[0]:
                return None
            rate_ms = (times[-1] - times[0]) / (offsets[-1] - offsets[0])
            at_ms = times[0] - (offsets[0] - committed) * rate_ms
        else:
            lo_off, lo_ms = offsets[index - 1], times[index - 1]
            hi_off, hi_ms = offsets[index], times[index]
            at_ms = lo_ms + (committed - lo_off) * (hi_ms - lo_ms) / (hi_off - lo_off)
        return max(0.0, (now_ms - at_ms) / 1000.0)

    def _curve(self, tp: TopicPartition) -> tuple[list[int], list[int]] | None:
        steps = self._ends.get(tp)
        if steps is None:
            return None
        count = int(steps[_COUNT])
        offsets = list(accumulate(steps[_STEPS : _STEPS + count - 1], initial=_base(steps)))
        return offsets, self._times[-count:].tolist()

    def _start(self, end: int) -> array[int]:
        """A partition's points, allocated once at full size: base (two words), count, steps."""
        steps = array("H", bytes(2 * (_STEPS + self._capacity - 1)))
        _set_base(steps, end)
        steps[_COUNT] = 1
        return steps


def _base(steps: array[int]) -> int:
    return steps[0] | (steps[1] << 16) | (steps[2] << 32) | (steps[3] << 48)


def _set_base(steps: array[int], end: int) -> None:
    for word in range(_BASE_WORDS):
        steps[word] = (end >> (16 * word)) & 0xFFFF
