"""`pipeline.content.fastjson` gives the standard library's results, byte for byte, on any JSON value.

The corners where msgspec (parsing) or orjson (writing) differ (integers beyond 64 bits, floats
below 1e-4, NaN and infinity, non-UTF-8 input) are generated on purpose, next to ordinary
Kubernetes-like objects.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.content.fastjson import canonical_json, loads

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.text(max_size=30)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)


def _reference(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@given(values)
def test_canonical_json_is_the_standard_librarys(value: Any) -> None:
    try:
        expected = _reference(value)
    except UnicodeEncodeError:  # a lone surrogate: both refuse it
        with pytest.raises(UnicodeEncodeError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected
    assert canonical_json(value, held=False) == expected


@given(values, st.booleans())
def test_loads_is_the_standard_librarys(value: Any, indent: bool) -> None:
    line = json.dumps(value, indent=2 if indent else None).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(line)
    except ValueError as refused:
        with pytest.raises(type(refused)):
            loads(line)
        return
    # repr compares types too (an int must not come back as a float) and treats NaN as equal
    assert repr(loads(line)) == repr(expected)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"n": 18446744073709551616}', 2**64),
        (b'{"n": -9223372036854775809}', -(2**63) - 1),
        (b'{"f": NaN}', math.nan),
        (json.dumps({"s": "\u00e9"}).encode("utf-16"), "\u00e9"),
    ],
)
def test_the_corners_where_parsers_differ(line: bytes, expected: object) -> None:
    (got,) = loads(line).values()
    assert repr(got) == repr(expected)


def test_broken_lines_are_refused() -> None:
    for line in (b'{"a": ', b"{'a': 1}", b"\xff\xfe{"):
        with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
            loads(line)


@pytest.mark.parametrize("value", [1e-5, 1.5e-7, -2.5e-300, math.inf, {"a": math.nan}, 2**64, {1: "int key"}])
def test_values_orjson_writes_differently(value: object) -> None:
    assert canonical_json(value) == _reference(value)


def test_canonical_bytes_hold_no_more_memory_than_their_length() -> None:
    """A snapshot holds thousands of canonical payloads until its chunk is written: each must cost
    about its length, not the encoder's whole write buffer (orjson's is 16 KiB and more)."""
    value = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "x" * 1024}}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [canonical_json(value) for _ in range(100)]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < len(kept) * (len(kept[0]) + 256)


def test_bytes_not_held_skip_the_copy_and_are_the_same() -> None:
    """A live event's canonical bytes are hashed and copied into its record, then dropped: they
    skip the exact-size copy (orjson's whole buffer is fine for a moment), with the same bytes."""
    value = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "\u00e9" * 9}}
    held, passing = canonical_json(value), canonical_json(value, held=False)
    assert held == passing == _reference(value)
