"""Audit timestamps to UTC microseconds.

The apiserver writes `stageTimestamp` as RFC 3339 with up to nine fractional digits; Python's
datetime keeps six, so extra digits are truncated (never rounded, never rejected). Anything that is
not RFC 3339 counts as absent (0), so the fact index falls back to the record's append time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

__all__ = ["parse_rfc3339_us"]

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def parse_rfc3339_us(value: object) -> int:
    """UTC microseconds since the epoch for an RFC 3339 string (or a datetime); 0 if unusable.

    A datetime is accepted because YAML recordings parse unquoted timestamps into one; a naive
    datetime is taken as UTC. The epoch itself and earlier instants also map to 0 ("absent"),
    matching the wire format's "0 when absent".
    """
    if isinstance(value, str):
        match = _RFC3339.fullmatch(value)
        if match is None:
            return 0
        year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
        micros = int(fraction[:6].ljust(6, "0")) if fraction else 0
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
