"""Avro binary primitives for the hand-written decoders (`fact_batch`, `object_state`).

fastavro builds a dict per record and the owner module then builds its dataclass from it; on the
two hot read paths (the fact follower's replay, a rebuild's first read of object-state) reading
the bytes straight into the dataclass is about twice as fast. These are the pieces both share;
`schema` only names the record in the `DecodeError` messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from pipeline.codec import DecodeError

__all__ = ["MAX_VARINT_BYTES", "read_bytes", "read_long", "read_string", "read_whole"]

T = TypeVar("T")

MAX_VARINT_BYTES: Final = 10


def read_long(data: bytes, pos: int, schema: str) -> tuple[int, int]:
    """The Avro `long` (zigzag varint) at `pos`, and the position after it."""
    result = shift = 0
    end = pos + MAX_VARINT_BYTES
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            result &= 0xFFFF_FFFF_FFFF_FFFF
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise DecodeError(f"{schema}: a varint is longer than {MAX_VARINT_BYTES} bytes")


def read_bytes(data: bytes, pos: int, schema: str) -> tuple[bytes, int]:
    """The Avro `bytes` at `pos` (a length, then that many bytes), and the position after it."""
    size, pos = read_long(data, pos, schema)
    if size < 0:
        raise DecodeError(f"{schema}: negative string length {size}")
    end = pos + size
    if end > len(data):
        raise DecodeError(f"{schema}: a string runs past the end of the record")
    return data[pos:end], end


def read_string(data: bytes, pos: int, schema: str) -> tuple[str, int]:
    """The Avro `string` at `pos` (UTF-8), and the position after it."""
    raw, pos = read_bytes(data, pos, schema)
    return raw.decode(), pos


def read_whole(data: bytes, schema: str, read: Callable[[bytes], tuple[T, int]]) -> T:
    """Run a hand-written decoder, `read(data) -> (value, end)`, with the checks fastavro makes.

    A payload that ends early (the decoder indexes past it), a string that is not UTF-8 and bytes
    left after the record are `DecodeError`s naming `schema`, as they are on the fastavro path.
    """
    try:
        value, pos = read(data)
    except IndexError:
        raise DecodeError(f"{schema}: the record ends early") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{schema}: a string is not UTF-8: {exc}") from None
    if pos != len(data):
        raise DecodeError(f"{schema}: {len(data) - pos} trailing bytes after the record")
    return value
