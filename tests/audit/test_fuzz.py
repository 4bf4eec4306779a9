"""Hypothesis-generated bodies never make the ingress answer 5xx while the log is up."""

from __future__ import annotations

import http.client
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.audit.conftest import ThreadedIngress
from tests.audit.corpus import MUTATIONLAB_AUDIT_FILES, WEBHOOK_FILES, as_event_list, load_recording, to_json

CORPUS_EVENTS = [
    e for p in WEBHOOK_FILES + MUTATIONLAB_AUDIT_FILES for e in as_event_list(load_recording(p))["items"]
]
CORPUS_EVENTS = [json.loads(to_json(e)) for e in CORPUS_EVENTS]

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
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_json_is_never_5xx(threaded_ingress: ThreadedIngress, value: Any) -> None:
    assert post(threaded_ingress, json.dumps(value).encode()) in (200, 400)


@given(event_lists)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_event_lists_with_wrong_types_are_accepted(threaded_ingress: ThreadedIngress, document: Any) -> None:
    body = json.dumps(document).encode()
    assert post(threaded_ingress, body) == (200 if len(body) <= 256 * 1024 else 413)


@given(event_lists, st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_truncated_bodies_are_400(threaded_ingress: ThreadedIngress, document: Any, cut: float) -> None:
    body = json.dumps(document).encode()
    truncated = body[: int(len(body) * cut)]
    assert post(threaded_ingress, truncated) in (400, 413)


@given(st.binary(max_size=2000))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_bytes_are_never_5xx(threaded_ingress: ThreadedIngress, body: bytes) -> None:
    assert post(threaded_ingress, body) in (200, 400)
