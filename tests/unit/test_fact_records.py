"""The hand-written fact_batch encoder matches fastavro byte for byte, and splitting keeps order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.codec import FACT_BATCH, SCHEMA_HEADER, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch, encode_fact_batch
from pipeline.facts.records import build_records, encode_batch
from pipeline.models import GroupResource, stream_key

texts = st.text(max_size=80) | st.text(max_size=300)
facts = st.builds(
    AuthorFact,
    author=st.text(min_size=1, max_size=40),
    display_name=texts,
    email=texts,
    verb=texts,
    audit_id=texts,
    namespace=texts,
    name=texts,
    uid=texts,
    resource_version=texts,
    stage_timestamp_us=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    label_selector=st.none() | texts,
    uids=st.none() | st.lists(texts, max_size=70),
)
batches = st.builds(
    FactBatch,
    route=texts,
    group_resource=st.builds(GroupResource, texts, texts),
    facts=st.lists(facts, max_size=8),
)


@given(batches)
def test_hand_encoder_is_byte_identical_to_fastavro(batch: FactBatch) -> None:
    fact_codec = codec(FACT_BATCH)
    payload = encode_fact_batch(batch)
    assert payload == fact_codec.encode(batch.to_avro())
    assert FactBatch.from_avro(fact_codec.decode(payload, fact_codec.header[1])) == batch


def test_lone_surrogates_are_replaced_not_fatal() -> None:
    batch = FactBatch("r", GroupResource("", "configmaps"), [AuthorFact("al\ud800ice", name="cm-\udfff")])
    fact_codec = codec(FACT_BATCH)
    decoded = FactBatch.from_avro(fact_codec.decode(encode_fact_batch(batch), fact_codec.header[1]))
    assert (decoded.facts[0].author, decoded.facts[0].name) == ("al?ice", "cm-?")


def test_split_keeps_order_and_fits() -> None:
    batch = FactBatch(
        "r", GroupResource("apps", "deployments"), [AuthorFact(f"user-{i}") for i in range(500)]
    )
    encoded = encode_batch(batch, 512)
    assert encoded.dropped == []
    assert len(encoded.payloads) > 1
    assert all(len(payload) <= 512 for payload in encoded.payloads)
    fact_codec = codec(FACT_BATCH)
    authors = [
        f.author
        for payload in encoded.payloads
        for f in FactBatch.from_avro(fact_codec.decode(payload, fact_codec.header[1])).facts
    ]
    assert authors == [f"user-{i}" for i in range(500)]


def test_build_records_keys_and_headers() -> None:
    gr = GroupResource("", "secrets")
    built = build_records([FactBatch("prod", gr, [AuthorFact("a")])], 4 * 1024 * 1024)
    (record,) = built.records
    assert record.key == stream_key("prod", gr)
    assert record.headers == ((SCHEMA_HEADER, b"fact_batch/1"),)
    assert built.dropped == []
