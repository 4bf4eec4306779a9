"""The allowlist that turns a live Kubernetes object into the content mirrored to Git.

It builds a new object from the fields that describe intent (listed in docs/watch.md, "Sanitize"),
so runtime noise such as `status`, `managedFields` or `resourceVersion` never reaches Git and never
makes a no-op change look like a change. The allowlist is reproduced exactly for byte compatibility
with repositories the upstream operator wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pipeline.content.fastjson import canonical_json

__all__ = ["content_hash", "is_terminating", "metadata_terminating", "sanitize", "sanitized_json"]

_TOP_LEVEL = (
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

_TOP_LEVEL_KEYS = frozenset(_TOP_LEVEL)
_TOP_LEVEL_ORDER = {key: index for index, key in enumerate(_TOP_LEVEL)}

_LABEL_PREFIXES = ("kustomize.toolkit.fluxcd.io/", "kro.run/", "applyset.kubernetes.io/")

_ANNOTATION_KEYS = frozenset(
    {"argocd.argoproj.io/tracking-id", "argocd.argoproj.io/installation-id", "kcp.io/cluster"}
)
_ANNOTATION_PREFIXES = (
    "kubectl.kubernetes.io/",
    "control-plane.alpha.kubernetes.io/",
    "deployment.kubernetes.io/",
    "autoscaling.alpha.kubernetes.io/",
    "kustomize.toolkit.fluxcd.io/",
    "applyset.kubernetes.io/",
)

# Fields the cluster assigns inside `spec` that would otherwise differ between clusters.
_KIND_SPEC_REMOVALS: dict[str, tuple[str, ...]] = {
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


def _clean_labels(labels: dict[Any, Any]) -> dict[Any, Any]:
    for key in labels:
        if str(key).startswith(_LABEL_PREFIXES):
            return {k: v for k, v in labels.items() if not str(k).startswith(_LABEL_PREFIXES)}
    return dict(labels)  # the common case: nothing to drop, copied without a loop in Python


def _clean_annotations(annotations: Any) -> dict[str, Any]:
    if not isinstance(annotations, dict) or not annotations:
        return {}
    return {
        k: v
        for k, v in annotations.items()
        if k not in _ANNOTATION_KEYS and not str(k).startswith(_ANNOTATION_PREFIXES)
    }


def sanitize(obj: dict[str, Any]) -> dict[str, Any]:
    """A new object holding only the allowlisted fields of `obj` (which is left untouched).

    It runs once per watch event, so it looks each field up once, skips empty label and
    annotation maps without a call and finds the allowlisted top-level fields with one set
    operation; a property test pins it, key order included, to the plain reading of the rules.
    """
    out: dict[str, Any] = {}
    if "apiVersion" in obj:
        out["apiVersion"] = obj["apiVersion"]
    if "kind" in obj:
        out["kind"] = obj["kind"]
    source_meta = obj.get("metadata")
    meta: dict[str, Any] = {}
    if isinstance(source_meta, dict):
        name = source_meta.get("name")
        if name:
            meta["name"] = name
        namespace = source_meta.get("namespace")
        if namespace:
            meta["namespace"] = namespace
        labels = source_meta.get("labels")
        if labels and isinstance(labels, dict):
            labels = _clean_labels(labels)
            if labels:
                meta["labels"] = labels
        annotations = source_meta.get("annotations")
        if annotations:
            annotations = _clean_annotations(annotations)
            if annotations:
                meta["annotations"] = annotations
    out["metadata"] = meta
    # a set operation finds the one or two allowlisted fields an object has, in C; they are
    # added in the allowlist's order, as a loop over it did
    present = _TOP_LEVEL_KEYS.intersection(obj)
    if len(present) == 1:
        (key,) = present
        out[key] = obj[key]
    elif present:
        for key in sorted(present, key=_TOP_LEVEL_ORDER.__getitem__):
            out[key] = obj[key]
    removals = _KIND_SPEC_REMOVALS.get(str(obj.get("kind", "")))
    if removals and isinstance(out.get("spec"), dict):
        out["spec"] = {k: v for k, v in out["spec"].items() if k not in removals}
    return out


def sanitized_json(sanitized: dict[str, Any], *, held: bool = True) -> bytes:
    """Canonical JSON (sorted keys, compact) so equal content always has equal bytes; `held=False`
    for bytes dropped at once (`pipeline.content.fastjson.canonical_json`)."""
    return canonical_json(sanitized, held=held)


def content_hash(payload: bytes, deleting: bool) -> bytes:
    """Digest of the sanitized JSON plus the delete intent, used to drop no-op updates."""
    digest = hashlib.sha256(payload)
    digest.update(b"\x01" if deleting else b"\x00")
    return digest.digest()


def is_terminating(obj: dict[str, Any]) -> bool:
    """True when `metadata.deletionTimestamp` is set: the object is already being deleted."""
    meta = obj.get("metadata")
    return isinstance(meta, dict) and metadata_terminating(meta)


def metadata_terminating(meta: Mapping[str, Any]) -> bool:
    """`is_terminating` for a caller that already holds the object's metadata."""
    return bool(meta.get("deletionTimestamp"))
