"""Avro binary primitives for the hand-written codecs (`fact_batch`, `object_state`, `watch_event`).

fastavro builds a dict per record and the owner module then builds its dataclass from it; on the
two hot read paths (the fact follower's replay, a rebuild's first read of object-state) reading
the bytes straight into the dataclass is about twice as fast. These are the pieces both share;
`schema` only names the record in the `DecodeError` messages. The writers serve the hand-written
encoders (the audit ingress's fact batches, the watch stage's events), for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from pipeline.codec import DecodeError

__all__ = [
    "MAX_VARINT_BYTES",
    "read_bytes",
    "read_long",
    "read_string",
    "read_whole",
    "write_bytes",
    "write_long",
    "write_string",
]

T = TypeVar("T")

MAX_VARINT_BYTES: Final = 10

# zigzag varints of -64..63 are one byte: most lengths, counts and flags
_ONE_BYTE: Final = {n: bytes([(n << 1) ^ (n >> 63)]) for n in range(-64, 64)}
# zigzag varints of 64..8191 are two bytes
_TWO_BYTES_END: Final = 8192


def write_long(value: int) -> bytes:
    """Avro `long` (and `int`): zigzag, then base-128 varint."""
    small = _ONE_BYTE.get(value)
    if small is not None:
        return small
    if 0 < value < _TWO_BYTES_END:
        # most payload lengths: zigzag 2n, low seven bits with the continuation bit, then the rest
        return bytes((((value << 1) & 0x7F) | 0x80, value >> 6))
    n = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_bytes(data: bytes) -> bytes:
    """Avro `bytes`: the length, then the bytes."""
    return write_long(len(data)) + data


def write_string(text: str, errors: str = "strict") -> bytes:
    """Avro `string` (UTF-8; `errors` as for `str.encode`)."""
    data = text.encode("utf-8", errors)
    return write_long(len(data)) + data


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
