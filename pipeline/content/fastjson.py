"""JSON on the watch path through orjson, with the standard library's exact results.

Every watch line is parsed and every sanitized object serialised once more for its canonical
bytes; with the standard library those two calls were most of the watch path's CPU. orjson is
several times faster but differs from `json` in two corners, and the canonical bytes must not
change (they are what Git holds and what unchanged-event detection hashes):

- integers beyond 64 bits (below -2**63 or above 2**64 - 1) parse as floats: a line holding a
  run of 19 or more digits is parsed by `json` instead (such a run inside a string, a timestamp
  in nanoseconds, only costs the slower parse);
- floats below 1e-4 are written `0.00001` / `1.5e-7` where `json` writes `1e-05` / `1.5e-07`,
  and NaN or infinity as `null`: output holding `0.0000`, `<digit>e-<digit>` or `null` is written
  again by `json` (a Deployment's `creationTimestamp: null` template pays the slower write).

The checks are substring searches over a copy with every digit mapped to `0`: a regular
expression over a 600-byte line cost more than parsing it. Output without `e-` anywhere needs no
copy for the exponent check.

Everything else (key order, escapes, non-ASCII, large exponents) is byte-identical; a property
test pins both functions to the standard library.
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

__all__ = ["canonical_json", "loads"]

_DIGITS_TO_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_BIG_INTEGER: Final = b"0" * 19
_SMALL_EXPONENT: Final = b"0e-0"


def loads(data: bytes) -> Any:
    """`json.loads(data)`; raises `ValueError` for what it refuses (orjson's error is one)."""
    if _BIG_INTEGER in data.translate(_DIGITS_TO_ZERO):
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # NaN, Infinity and numbers beyond a double: the standard library decides.
        return json.loads(data)


def canonical_json(value: Any, *, held: bool = True) -> bytes:
    """`json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()`.

    `held=False` is for bytes the caller drops at once (a live watch event's are hashed and
    copied into its record): they skip the exact-size copy below.
    """
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        out = b""  # integers beyond 64 bits, NaN-free types orjson does not know: json decides
    if (
        out
        and b"null" not in out
        and b"0.0000" not in out
        and (b"e-" not in out or _SMALL_EXPONENT not in out.translate(_DIGITS_TO_ZERO))
    ):
        # orjson hands back its whole write buffer (16 KiB and up for a 1 KiB object); a snapshot
        # holds thousands of these payloads, so it keeps an exact-size copy instead
        return bytes(memoryview(out)) if held else out
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
