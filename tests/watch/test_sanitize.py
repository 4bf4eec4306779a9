"""The sanitize allowlist (docs/watch.md, "Sanitize") on the recorded corpus objects."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pipeline.content.sanitize import content_hash, is_terminating, sanitize, sanitized_json
from tests.watch.kube_server import corpus_object

ALLOWED_TOP = {
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "data",
    "binaryData",
    "rules",
    "subjects",
    "roleRef",
    "webhooks",
    "template",
    "involvedObject",
    "reason",
    "message",
    "type",
    "eventTime",
}


def test_configmap_keeps_intent_and_drops_server_fields() -> None:
    obj = corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a")
    clean = sanitize(obj)
    assert set(clean) == {"apiVersion", "kind", "metadata", "data"}
    assert clean["data"] == obj["data"]
    assert set(clean["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    assert clean["metadata"]["namespace"] == "team-a"
    assert "managedFields" in obj["metadata"]  # the input is left untouched


def test_status_only_update_sanitizes_to_the_same_bytes() -> None:
    first = corpus_object("deployment/status-update/watch.modified.1.yaml", "team-a")
    second = corpus_object("deployment/status-update/watch.modified.2.yaml", "team-a")
    assert first != second
    one, two = sanitized_json(sanitize(first)), sanitized_json(sanitize(second))
    assert one == two
    assert content_hash(one, False) == content_hash(two, False)
    assert content_hash(one, False) != content_hash(one, True)
    assert "status" not in json.loads(one)
    assert json.loads(one)["spec"]["progressDeadlineSeconds"] == first["spec"]["progressDeadlineSeconds"]


def test_pod_node_name_removed_and_terminating_detected() -> None:
    pod = corpus_object("pod/graceful-delete/watch.modified.yaml", "team-a")
    pod["spec"]["nodeName"] = "node-1"
    clean = sanitize(pod)
    assert "nodeName" not in clean["spec"]
    assert clean["spec"]["containers"] == pod["spec"]["containers"]
    assert is_terminating(pod)
    assert not is_terminating(corpus_object("configmap/update/watch.modified.yaml", "team-a"))


def test_aggregated_api_object_keeps_spec_and_drops_status() -> None:
    flunder = corpus_object("flunder/aggregated-api-write/watch.added.yaml", "team-a")
    clean = sanitize(flunder)
    assert clean["spec"] == flunder["spec"]
    assert "status" not in clean


def test_labels_annotations_and_kind_specific_fields() -> None:
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web",
            "namespace": "team-a",
            "uid": "u",
            "labels": {"app": "web", "kustomize.toolkit.fluxcd.io/name": "x", "kro.run/owned": "y"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "argocd.argoproj.io/tracking-id": "t",
                "argocd.argoproj.io/sync-wave": "1",
                "app.kubernetes.io/instance": "web",
            },
            "finalizers": ["x"],
        },
        "spec": {
            "clusterIP": "10.0.0.1",
            "clusterIPs": ["10.0.0.1"],
            "ports": [{"port": 80}],
            "ipFamilies": ["IPv4"],
        },
        "status": {"loadBalancer": {}},
        "immutable": True,
    }
    clean = sanitize(service)
    assert clean["metadata"] == {
        "name": "web",
        "namespace": "team-a",
        "labels": {"app": "web"},
        "annotations": {"argocd.argoproj.io/sync-wave": "1", "app.kubernetes.io/instance": "web"},
    }
    assert clean["spec"] == {"ports": [{"port": 80}]}
    assert "immutable" not in clean


def test_empty_label_and_annotation_maps_are_omitted() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "sa", "labels": {"kro.run/x": "1"}, "annotations": {"kcp.io/cluster": "c"}},
        "secrets": [{"name": "token"}],
        "automountServiceAccountToken": False,
    }
    assert sanitize(obj) == {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.sampled_from(sorted(ALLOWED_TOP | {"status", "immutable", "x"})), json_values))
def test_sanitize_is_an_idempotent_allowlist(obj: dict[str, Any]) -> None:
    clean = sanitize(obj)
    assert set(clean) <= ALLOWED_TOP
    assert sanitize(clean) == clean
    assert sanitized_json(clean) == sanitized_json(json.loads(sanitized_json(clean)))
