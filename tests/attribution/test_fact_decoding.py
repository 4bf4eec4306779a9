"""The follower's hand-written `fact_batch/1` decoder against fastavro (through the codec).

The decoder exists only for speed, so the property is strict: for any payload it either refuses
with `DecodeError` or yields exactly what fastavro yields, and every valid payload is accepted.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.codec import FACT_BATCH, DecodeError, codec
from pipeline.codec.fact_batch import (
    HAND_WRITTEN,
    AuthorFact,
    FactBatch,
    FactRow,
    avro_fact_row,
    decode_fact_batch_v1,
)
from pipeline.models import GroupResource
from tests.support.avro_values import damaged

WRITER = codec(FACT_BATCH)

# Short and long (multi-byte length) strings, ASCII and not.
texts = st.one_of(st.just(""), st.text(max_size=8), st.text(min_size=60, max_size=200))
verbs = st.sampled_from(["create", "update", "patch", "delete", "deletecollection", "DeleteCollection", ""])
facts = st.builds(
    AuthorFact,
    author=texts,
    display_name=texts,
    email=texts,
    verb=verbs,
    audit_id=texts,
    namespace=texts,
    name=texts,
    uid=texts,
    resource_version=texts,
    # Any long, and often one of the 8-byte varints the decoder reads as one word (real times).
    stage_timestamp_us=st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**55), 2**55 - 1),
    label_selector=st.none() | texts,
    uids=st.none() | st.lists(texts, max_size=5),
)
batches = st.builds(
    FactBatch,
    route=texts,
    group_resource=st.builds(GroupResource, texts, texts),
    facts=st.lists(facts, max_size=6),
)


def expected(payload: bytes) -> tuple[str, str, str, list[FactRow]]:
    """What fastavro decodes, as rows; raises DecodeError where the codec refuses the payload."""
    batch: dict[str, Any] = WRITER.decode(payload, HAND_WRITTEN)
    rows = [avro_fact_row(fact) for fact in batch["facts"]]
    return batch["route"], batch["group"], batch["resource"], rows


def encode(batch: FactBatch) -> bytes:
    return WRITER.encode(batch.to_avro())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches)
def test_every_valid_payload_decodes_as_fastavro_does(batch: FactBatch) -> None:
    payload = encode(batch)
    assert decode_fact_batch_v1(payload) == expected(payload)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged(batches.map(encode)))
def test_a_damaged_payload_is_refused_or_decoded_exactly_as_fastavro_does(payload: bytes) -> None:
    try:
        got = decode_fact_batch_v1(payload)
    except DecodeError:
        return  # refusing is always safe: the follower counts and skips the record
    assert got == expected(payload), "accepted a payload and read it differently from fastavro"


def test_refusals_name_the_problem() -> None:
    valid = encode(FactBatch("prod", GroupResource("", "configmaps"), [AuthorFact("alice", uid="u")]))
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode_fact_batch_v1(valid + b"\x00")
    with pytest.raises(DecodeError, match=r"ends early|runs past the end"):
        decode_fact_batch_v1(valid[:-3])
    with pytest.raises(DecodeError, match="not UTF-8"):
        decode_fact_batch_v1(b"\x04\xff\xfe" + valid[5:])
    with pytest.raises(DecodeError, match="negative string length"):
        decode_fact_batch_v1(b"\x03" + valid[1:])
    with pytest.raises(DecodeError, match="varint"):
        decode_fact_batch_v1(b"\xff" * 11 + b"\x00")


@pytest.mark.parametrize(
    "stage_us",
    [
        0,
        1,
        -1,
        2**48 - 1,
        2**48,
        -(2**48),
        -(2**48) - 1,
        1_764_547_200_000_000,
        2**55 - 1,
        2**55,
        -(2**55),
        -(2**55) - 1,
        2**63 - 1,
        -(2**63),
    ],
)
def test_stage_times_at_every_varint_length_around_the_one_word_path(stage_us: int) -> None:
    """8-byte varints (real times) take the one-word path; 7 and 9 bytes, the last fact of a
    record (fewer than 8 bytes follow) and a truncated word must read exactly as fastavro does."""
    fact = AuthorFact("a", uid="u", stage_timestamp_us=stage_us)
    batch = FactBatch("r", GroupResource("", "pods"), [fact, fact])
    payload = encode(batch)
    assert decode_fact_batch_v1(payload) == expected(payload)
    assert decode_fact_batch_v1(payload)[3][1][9] == stage_us
    for cut in range(1, 12):
        with pytest.raises(DecodeError):
            decode_fact_batch_v1(payload[:-cut])


def test_array_blocks_with_negative_counts_are_read_like_fastavro() -> None:
    """Other Avro writers may write blocks as (-count, byte size); fastavro reads them, so must we."""
    fact = AuthorFact("alice", verb="deletecollection", namespace="ns", uids=["u1", "u2"])
    batch = FactBatch("prod", GroupResource("apps", "deployments"), [fact, AuthorFact("bob", uid="u3")])
    parsed = WRITER.current.parsed
    head = io.BytesIO()
    for text in ("prod", "apps", "deployments"):
        fastavro.schemaless_writer(head, "string", text)
    facts_schema = parsed["fields"][3]["type"]["items"]
    body = io.BytesIO()
    for one in batch.facts:
        fastavro.schemaless_writer(body, facts_schema, one.to_avro())
    blocked = io.BytesIO()
    fastavro.schemaless_writer(blocked, "long", -2)
    fastavro.schemaless_writer(blocked, "long", len(body.getvalue()))
    payload = head.getvalue() + blocked.getvalue() + body.getvalue() + b"\x00"
    assert decode_fact_batch_v1(payload) == expected(payload)
    assert decode_fact_batch_v1(payload)[3][0][11] == ["u1", "u2"]
