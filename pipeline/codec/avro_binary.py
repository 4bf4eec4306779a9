"""Avro binary primitives for the hand-written decoders (`fact_batch`, `object_state`).

fastavro builds a dict per record and the owner module then builds its dataclass from it; on the
two hot read paths (the fact follower's replay, a rebuild's first read of object-state) reading
the bytes straight into the dataclass is about twice as fast. These are the pieces both share;
`schema` only names the record in the `DecodeError` messages.
"""

from __future__ import annotations

from typing import Final

from pipeline.codec import DecodeError

__all__ = ["MAX_VARINT_BYTES", "read_bytes", "read_long", "read_string"]

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
