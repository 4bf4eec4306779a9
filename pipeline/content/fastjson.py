"""JSON on the watch path through msgspec and orjson, with the standard library's exact results.

Every watch line is parsed and every sanitized object serialised once more for its canonical
bytes; with the standard library those two calls were most of the watch path's CPU.

Parsing is msgspec's: it gives `json.loads`'s values (integers of any size, correctly rounded
floats, the last of duplicate keys) and refuses what it does not take (NaN and infinity, numbers
beyond a double, lone surrogates, a byte order mark, UTF-16 or UTF-32), which `json` then parses
or refuses itself. A caller that reads only some fields may name them in a shape (`decoder`): a
`TypedDict` whose fields msgspec keeps while it skips the rest of the line without building it
(a watch event's `managedFields` and `status`, most of its bytes).

Writing is orjson's, which differs from `json` in two corners the canonical bytes must not
(they are what Git holds and what unchanged-event detection hashes):

- integers beyond 64 bits (below -2**63 or above 2**64 - 1) are refused: `json` writes them;
- floats below 1e-4 are written `0.00001` / `1.5e-7` where `json` writes `1e-05` / `1.5e-07`,
  and NaN or infinity as `null`: output holding `0.0000`, `<digit>e-<digit>` or `null` is written
  again by `json` (a Deployment's `creationTimestamp: null` template pays the slower write).

The exponent check is a substring search over a copy with every digit mapped to `0` (a regular
expression cost more than the write), made only for output with `e-` in it.

Everything else (key order, escapes, non-ASCII, large exponents) is byte-identical; property
tests pin these functions to the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import msgspec
import orjson

__all__ = ["canonical_json", "decoder", "loads"]

_DIGITS_TO_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_SMALL_EXPONENT: Final = b"0e-0"
_DECODE_ANY: Final = msgspec.json.Decoder().decode


def loads(data: bytes) -> Any:
    """`json.loads(data)`; raises `ValueError` for what it refuses."""
    try:
        return _DECODE_ANY(data)
    except msgspec.DecodeError:
        return json.loads(data)


def decoder(shape: type) -> Callable[[bytes], Any]:
    """`loads` for a caller that reads only the fields of `shape` (nested `TypedDict`s with
    `total=False`): the value holds those fields, as `loads` gives them, and no others.

    A line whose fields are not the shape's JSON types (an object's `metadata` that is not an
    object), or that msgspec refuses, comes back whole from `loads`: more fields than the shape's,
    the ones it names the same.
    """
    decode: Callable[[bytes], Any] = msgspec.json.Decoder(shape).decode

    def decode_shaped(data: bytes) -> Any:
        try:
            return decode(data)
        except msgspec.DecodeError:
            return loads(data)

    return decode_shaped


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
