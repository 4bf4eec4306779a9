"""The sanitize allowlist (docs/watch.md, "Sanitize") on the recorded corpus objects."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pipeline.content.sanitize import content_hash, is_terminating, sanitize, sanitized_json
from tests.watch.kube_server import corpus_object

# the allowlist written out again, in the order the sanitizer keeps: the reference the tests hold it to
TOP_LEVEL_ORDER = (
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
)
ALLOWED_TOP = frozenset(TOP_LEVEL_ORDER)


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


def _reference_sanitize(obj: dict[str, Any]) -> dict[str, Any]:
    """The allowlist read plainly, as `sanitize` was written before it was made faster: the
    model the property test below holds the faster version to."""
    label_prefixes = ("kustomize.toolkit.fluxcd.io/", "kro.run/", "applyset.kubernetes.io/")
    annotation_keys = {
        "argocd.argoproj.io/tracking-id",
        "argocd.argoproj.io/installation-id",
        "kcp.io/cluster",
    }
    annotation_prefixes = (
        "kubectl.kubernetes.io/",
        "control-plane.alpha.kubernetes.io/",
        "deployment.kubernetes.io/",
        "autoscaling.alpha.kubernetes.io/",
        "kustomize.toolkit.fluxcd.io/",
        "applyset.kubernetes.io/",
    )
    spec_removals = {
        "Service": (
            "clusterIP",
            "clusterIPs",
            "healthCheckNodePort",
            "ipFamilies",
            "ipFamilyPolicy",
            "internalTrafficPolicy",
        ),
        "Pod": ("nodeName",),
        "PersistentVolumeClaim": ("volumeName", "volumeMode"),
    }
    top_level = [key for key in TOP_LEVEL_ORDER if key not in ("apiVersion", "kind", "metadata")]
    out: dict[str, Any] = {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = obj[key]
    source_meta = obj.get("metadata")
    meta: dict[str, Any] = {}
    if isinstance(source_meta, dict):
        for key in ("name", "namespace"):
            if source_meta.get(key):
                meta[key] = source_meta[key]
        labels = source_meta.get("labels")
        labels = (
            {k: v for k, v in labels.items() if not str(k).startswith(label_prefixes)}
            if isinstance(labels, dict)
            else {}
        )
        if labels:
            meta["labels"] = labels
        annotations = source_meta.get("annotations")
        annotations = (
            {
                k: v
                for k, v in annotations.items()
                if k not in annotation_keys and not str(k).startswith(annotation_prefixes)
            }
            if isinstance(annotations, dict)
            else {}
        )
        if annotations:
            meta["annotations"] = annotations
    out["metadata"] = meta
    for key in top_level:
        if key in obj:
            out[key] = obj[key]
    removals = spec_removals.get(str(obj.get("kind", "")))
    if removals and isinstance(out.get("spec"), dict):
        out["spec"] = {k: v for k, v in out["spec"].items() if k not in removals}
    return out


_meta_keys = st.sampled_from(
    [
        "app",
        "kro.run/owned",
        "kustomize.toolkit.fluxcd.io/name",
        "applyset.kubernetes.io/id",
        "kubectl.kubernetes.io/last-applied-configuration",
        "deployment.kubernetes.io/revision",
        "argocd.argoproj.io/tracking-id",
        "kcp.io/cluster",
        "argocd.argoproj.io/sync-wave",
    ]
) | st.text(max_size=12)
_meta_maps = st.dictionaries(_meta_keys, st.text(max_size=4), max_size=5) | json_values
_metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=4) | st.none(),
        "namespace": st.text(max_size=4) | st.integers(0, 2),
        "labels": _meta_maps,
        "annotations": _meta_maps,
        "uid": st.text(max_size=4),
        "resourceVersion": st.text(max_size=4),
    },
)
_spec = st.dictionaries(
    st.sampled_from(["clusterIP", "ipFamilies", "nodeName", "volumeName", "volumeMode", "ports", "x"]),
    json_values,
)
_objects = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["v1", "apps/v1"]),
        "kind": st.sampled_from(["Service", "Pod", "PersistentVolumeClaim", "ConfigMap"]) | json_values,
        "metadata": _metadata | json_values,
        "spec": _spec | json_values,
        "status": json_values,
        "data": json_values,
        "type": json_values,
        "rules": json_values,
        "template": json_values,
        "reason": json_values,
        "message": json_values,
        "immutable": st.booleans(),
    },
)


def _key_orders(value: Any) -> Any:
    """The keys of every mapping in `value`, in insertion order (equality of dicts ignores it)."""
    if isinstance(value, dict):
        return [(k, _key_orders(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_key_orders(v) for v in value]
    return value


@given(_objects)
def test_sanitize_matches_the_plain_reading_of_the_allowlist(obj: dict[str, Any]) -> None:
    before = json.dumps(obj, sort_keys=True)
    clean, expected = sanitize(obj), _reference_sanitize(obj)
    assert clean == expected
    assert _key_orders(clean) == _key_orders(expected)
    assert sanitized_json(clean) == sanitized_json(expected)
    assert json.dumps(obj, sort_keys=True) == before  # the input is left untouched


@given(_objects, st.randoms(use_true_random=False))
def test_sanitize_writes_the_allowlists_order_whatever_the_objects(
    obj: dict[str, Any], rnd: random.Random
) -> None:
    """The allowlisted fields an object has are found as a set: they must still come out in the
    allowlist's order (the sealed document keeps it), not in the order the object had them."""
    items = list(obj.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert _key_orders(sanitize(shuffled)) == _key_orders(_reference_sanitize(shuffled))
