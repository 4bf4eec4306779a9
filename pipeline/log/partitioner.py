"""Kafka's default key partitioner, bit for bit.

The embedded log must put a key on the same partition the Java client (and aiokafka) would, so a
topic written by one backend and read by the other keeps every key's records in one partition.
"""

from __future__ import annotations

import functools

__all__ = ["murmur2", "murmur2_partition", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with Kafka's seed, as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    remaining = length & 3
    if remaining == 3:
        h ^= data[tail + 2] << 16
    if remaining >= 2:
        h ^= data[tail + 1] << 8
    if remaining >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not `abs`, which breaks on MIN_VALUE)."""
    return number & 0x7FFFFFFF


@functools.lru_cache(maxsize=4096)
def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key` among `partitions`.

    Remembered for the last few thousand keys: a writer sends many records under one key (a
    watch stream's every event), and the hash in Python cost microseconds per record.
    """
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return to_positive(murmur2(key)) % partitions
