"""Kafka-compatible key partitioning: vectors from Kafka's own tests, and agreement with aiokafka."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from pipeline.log.partitioner import murmur2, murmur2_partition, to_positive

# Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_UTILS_TEST_VECTORS.items()))
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_to_positive_clears_only_the_sign_bit() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(123) == 123


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=1000))
def test_partition_agrees_with_aiokafka(key: bytes, partitions: int) -> None:
    expected = (aiokafka_murmur2(key) & 0x7FFFFFFF) % partitions
    assert murmur2_partition(key, partitions) == expected
    assert 0 <= murmur2_partition(key, partitions) < partitions


@given(st.binary(max_size=64))
def test_murmur2_is_a_signed_32_bit_int(data: bytes) -> None:
    assert -(2**31) <= murmur2(data) < 2**31


def test_partition_rejects_non_positive_partition_counts() -> None:
    with pytest.raises(ValueError, match="partitions must be positive"):
        murmur2_partition(b"k", 0)
