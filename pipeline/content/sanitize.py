"""The allowlist that turns a live Kubernetes object into the content mirrored to Git.

It builds a new object from the fields that describe intent (listed in docs/watch.md, "Sanitize"),
so runtime noise such as `status`, `managedFields` or `resourceVersion` never reaches Git and never
makes a no-op change look like a change. The allowlist is reproduced exactly for byte compatibility
with repositories the upstream operator wrote.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pipeline.content.fastjson import canonical_json

__all__ = ["content_hash", "is_terminating", "sanitize", "sanitized_json"]

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


def _clean_labels(labels: Any) -> dict[str, Any]:
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if not str(k).startswith(_LABEL_PREFIXES)}


def _clean_annotations(annotations: Any) -> dict[str, Any]:
    if not isinstance(annotations, dict):
        return {}
    return {
        k: v
        for k, v in annotations.items()
        if k not in _ANNOTATION_KEYS and not str(k).startswith(_ANNOTATION_PREFIXES)
    }


def sanitize(obj: dict[str, Any]) -> dict[str, Any]:
    """A new object holding only the allowlisted fields of `obj` (which is left untouched)."""
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
        labels = _clean_labels(source_meta.get("labels"))
        if labels:
            meta["labels"] = labels
        annotations = _clean_annotations(source_meta.get("annotations"))
        if annotations:
            meta["annotations"] = annotations
    out["metadata"] = meta
    for key in _TOP_LEVEL:
        if key in obj:
            out[key] = obj[key]
    removals = _KIND_SPEC_REMOVALS.get(str(obj.get("kind", "")))
    if removals and isinstance(out.get("spec"), dict):
        out["spec"] = {k: v for k, v in out["spec"].items() if k not in removals}
    return out


def sanitized_json(sanitized: dict[str, Any]) -> bytes:
    """Canonical JSON (sorted keys, compact) so equal content always has equal bytes."""
    return canonical_json(sanitized)


def content_hash(payload: bytes, deleting: bool) -> bytes:
    """Digest of the sanitized JSON plus the delete intent, used to drop no-op updates."""
    digest = hashlib.sha256(payload)
    digest.update(b"\x01" if deleting else b"\x00")
    return digest.digest()


def is_terminating(obj: dict[str, Any]) -> bool:
    """True when `metadata.deletionTimestamp` is set: the object is already being deleted."""
    meta = obj.get("metadata")
    return isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))
