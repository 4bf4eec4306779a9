"""Audit timestamps to UTC microseconds.

The apiserver writes `stageTimestamp` as RFC 3339 with up to nine fractional digits; Python's
datetime keeps six, so extra digits are truncated (never rounded, never rejected). Anything that is
not RFC 3339 counts as absent (0), so the fact index falls back to the record's append time.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta, timezone

__all__ = ["parse_rfc3339_us"]

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


@functools.lru_cache(maxsize=64)
def _midnight_us(date: str) -> int | None:
    """Microseconds at UTC midnight of `YYYY-MM-DD` (cached: a batch shares a handful of dates)."""
    try:
        moment = datetime(int(date[:4]), int(date[5:7]), int(date[8:10]), tzinfo=UTC)
    except ValueError:
        return None
    return (moment - _EPOCH) // _ONE_US


_SECONDS_US: dict[str, int] = {}
_SECONDS_CACHE_SIZE = 4096


def _second_us(prefix: str) -> int:
    """`YYYY-MM-DDTHH:MM:SS` to UTC microseconds via the full parse, remembered when valid."""
    result = parse_rfc3339_us(prefix + "Z")
    if result > 0:
        if len(_SECONDS_US) >= _SECONDS_CACHE_SIZE:
            _SECONDS_US.clear()
        _SECONDS_US[prefix] = result
    return result


def parse_rfc3339_us(value: object) -> int:
    """UTC microseconds since the epoch for an RFC 3339 string (or a datetime); 0 if unusable.

    A datetime is accepted because YAML recordings parse unquoted timestamps into one; a naive
    datetime is taken as UTC. The epoch itself and earlier instants also map to 0 ("absent"),
    matching the wire format's "0 when absent".
    """
    if isinstance(value, str):
        # Fast path for the apiserver's own shape, `YYYY-MM-DDTHH:MM:SS.ffffffZ`: one cached
        # whole-second prefix per second of audit traffic, validated by the full parse on a miss.
        if len(value) == 27 and value[19] == "." and value[26] == "Z":
            fraction = value[20:26]
            if fraction.isascii() and fraction.isdigit():
                second_us = _SECONDS_US.get(value[:19])
                if second_us is None:
                    second_us = _second_us(value[:19])
                if second_us > 0:
                    return second_us + int(fraction)
        match = _RFC3339.fullmatch(value)
        if match is None:
            return 0
        year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
        micros = int(fraction[:6].ljust(6, "0")) if fraction else 0
        if zulu and hour < "24" and minute < "60" and second < "60":
            midnight_us = _midnight_us(value[:10])
            if midnight_us is None:
                return 0
            result = midnight_us + ((int(hour) * 60 + int(minute)) * 60 + int(second)) * 1_000_000 + micros
            return result if result > 0 else 0
        if zulu:
            tz = UTC
        else:
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            if offset >= timedelta(hours=24):
                return 0
            tz = timezone(-offset if sign == "-" else offset)
        try:
            moment = datetime(
                int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tz
            )
        except ValueError:
            return 0
    elif isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    else:
        return 0
    try:
        result = (moment - _EPOCH) // _ONE_US
    except OverflowError:
        return 0
    return result if result > 0 else 0
