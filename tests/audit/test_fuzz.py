"""Hypothesis-generated bodies never make the ingress answer 5xx while the log is up.

Each answer is checked against what was published: nothing for a refused or event-less body, and
for an accepted EventList every untouched recorded event that the corpus table says is published.
Hostile bodies (compressed, truncated gzip, lone surrogates, invalid UTF-8, deep nesting, wrong
types) are each a 4xx with a one-line reason, counted, or an accepted list.
"""

from __future__ import annotations

import gzip
import http.client
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from pipeline.codec.fact_batch import FactBatch
from tests.audit.conftest import ThreadedIngress
from tests.audit.corpus import (
    MUTATIONLAB_AUDIT_FILES,
    PUBLISHED,
    WEBHOOK_FILES,
    as_event_list,
    load_recording,
    recording_id,
    to_json,
)
from tests.support.hypothesis_profile import TIMING_CHECKS

# (event as JSON, what it publishes on its own) for every recorded event
CORPUS: list[tuple[Any, list[tuple[str, str, str, str]]]] = [
    (json.loads(to_json(e)), PUBLISHED[recording_id(p)])
    for p in WEBHOOK_FILES + MUTATIONLAB_AUDIT_FILES
    for e in as_event_list(load_recording(p))["items"]
]
CORPUS_EVENTS = [event for event, _ in CORPUS]
FIXTURE_CHECKS = [*TIMING_CHECKS, HealthCheck.function_scoped_fixture]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=40,
)
huge_strings = st.integers(min_value=10_000, max_value=200_000).map(lambda n: "x" * n)
EVENT_KEYS = [
    "stage", "verb", "requestURI", "user", "impersonatedUser", "objectRef", "responseStatus",
    "requestObject", "responseObject", "stageTimestamp", "auditID", "kind",
]  # fmt: skip


@st.composite
def mutated_event(draw: st.DrawFn) -> Any:
    event = dict(draw(st.sampled_from(CORPUS_EVENTS)))
    for key in draw(st.lists(st.sampled_from(EVENT_KEYS), max_size=4)):
        event[key] = draw(json_values | huge_strings)
    return event


event_lists = st.builds(
    lambda items: {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items},
    st.lists(mutated_event() | json_values, max_size=12),
)


def published(batches: list[FactBatch]) -> list[tuple[str, str, str, str]]:
    return [(b.group_resource.key, f.name, f.author, f.verb) for b in batches for f in b.facts]


def post_and_read(server: ThreadedIngress, body: bytes) -> tuple[int, list[tuple[str, str, str, str]]]:
    """The answer to `body` and the facts published while answering it."""
    mark = server.ends()
    status = post(server, body)
    return status, published(server.published_after(mark))


def post(server: ThreadedIngress, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(
            "POST", "/audit-webhook/default", body=body, headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@given(json_values)
@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_CHECKS)
def test_random_json_is_never_5xx(threaded_ingress: ThreadedIngress, value: Any) -> None:
    status, facts = post_and_read(threaded_ingress, json.dumps(value).encode())
    assert status in (200, 400)
    assert facts == [], "a body holding no audit event publishes nothing"


@given(event_lists)
@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_CHECKS)
def test_event_lists_with_wrong_types_are_accepted(threaded_ingress: ThreadedIngress, document: Any) -> None:
    body = json.dumps(document).encode()
    status, facts = post_and_read(threaded_ingress, body)
    if len(body) > 256 * 1024:
        assert (status, facts) == (413, [])
        return
    assert status == 200
    items = document["items"]
    # every untouched recorded event is published as it is on its own; mangled ones at most once
    must = {fact for event, expected in CORPUS for fact in expected if event in items}
    assert must <= set(facts), must - set(facts)
    assert len(facts) <= sum(isinstance(item, dict) for item in items)


@given(event_lists, st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_CHECKS)
def test_truncated_bodies_are_400(threaded_ingress: ThreadedIngress, document: Any, cut: float) -> None:
    body = json.dumps(document).encode()
    truncated = body[: int(len(body) * cut)]
    status, facts = post_and_read(threaded_ingress, truncated)
    assert status in (400, 413)
    assert facts == [], "a refused body publishes nothing"


@given(st.binary(max_size=2000))
@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_CHECKS)
def test_random_bytes_are_never_5xx(threaded_ingress: ThreadedIngress, body: bytes) -> None:
    status, facts = post_and_read(threaded_ingress, body)
    assert status in (200, 400)
    assert facts == [], "random bytes publish nothing"


# --- hostile bodies (issue 27): every one is a 4xx with a reason, counted, or an accepted list ---

IDENTITY = [None, "identity", "IDENTITY", " identity "]
COMPRESSED = ["gzip", "x-gzip", "deflate", "br", "zstd", "compress", "gzip, identity", "*", "identity, gzip"]
LONE_SURROGATES = st.integers(min_value=0xD800, max_value=0xDFFF).map(chr)
INVALID_UTF8 = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"])
STRING_FIELDS = [
    ("objectRef", "resource"), ("objectRef", "apiGroup"), ("objectRef", "name"),
    ("objectRef", "namespace"), ("user", "username"), ("impersonatedUser", "username"),
]  # fmt: skip


def as_body(document: Any) -> bytes:
    return json.dumps(document).encode()  # ensure_ascii: a lone surrogate becomes a "\udXXX" escape


@st.composite
def with_surrogate(draw: st.DrawFn) -> bytes:
    event = json.loads(json.dumps(draw(st.sampled_from(CORPUS_EVENTS))))
    outer, inner = draw(st.sampled_from(STRING_FIELDS))
    text = draw(st.text(max_size=8)) + draw(LONE_SURROGATES) + draw(st.text(max_size=8))
    if not isinstance(event.get(outer), dict):
        event[outer] = {}
    event[outer][inner] = text
    return as_body({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [event]})


@st.composite
def with_invalid_utf8(draw: st.DrawFn) -> bytes:
    body = as_body(draw(event_lists))
    at = draw(st.integers(min_value=0, max_value=len(body)))
    return body[:at] + draw(INVALID_UTF8) + body[at:]


@st.composite
def gzipped(draw: st.DrawFn) -> bytes:
    packed = gzip.compress(as_body(draw(event_lists)))
    return packed[: draw(st.integers(min_value=0, max_value=len(packed)))]


def nested(depth: int) -> bytes:
    inner = b"[" * depth + b"]" * depth
    return b'{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[' + inner + b"]}"


hostile_bodies = st.one_of(
    with_surrogate(),
    with_invalid_utf8(),
    gzipped(),
    st.integers(min_value=1, max_value=100_000).map(nested),
    st.integers(min_value=1, max_value=100_000).map(lambda depth: b"[" * depth),
    event_lists.map(as_body),
    json_values.map(as_body),
)


def rejected_total() -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "reverser_audit_rejected_requests"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


def exchange(server: ThreadedIngress, body: bytes, encoding: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/audit-webhook/default", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@given(hostile_bodies, st.sampled_from(IDENTITY + COMPRESSED))
@settings(max_examples=300, deadline=None, suppress_health_check=FIXTURE_CHECKS)
def test_hostile_bodies_are_refused_with_a_reason_or_accepted(
    threaded_ingress: ThreadedIngress, body: bytes, encoding: str | None
) -> None:
    mark = threaded_ingress.ends()
    refused_before = rejected_total()
    status, text = exchange(threaded_ingress, body, encoding)
    facts = published(threaded_ingress.published_after(mark))
    assert text.strip(), "every answer says why"
    assert text.endswith("\n")
    assert text.count("\n") == 1, "in one line"
    if encoding in COMPRESSED:
        assert (status, facts) == (415, [])
    else:
        assert status in (200, 400, 413), text
    if status != 200:
        assert facts == [], "a refused body publishes nothing"
        assert rejected_total() - refused_before == 1, "every refusal is counted with its reason"
