"""The scale key: which object version a write through the `scale` subresource makes.

A Scale AdmissionReview carries the parent's uid, its resourceVersion before the write
(`oldObject`) and the new replica count, but never the parent's content or the version the write
will get, so the content key cannot name it. The version a scale makes is the first one after the
old resourceVersion, with the new count. The router knows the event's resourceVersion, its
`spec.replicas` and the object's previous version it mirrored (versions in between changed only
what is not mirrored, such as status), so the index can join them (docs/attribution.md, "Scale
facts"). The prefix keeps a scale key from ever equalling a resourceVersion or a content key in the
fact index's exact slots.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final

from pipeline.content import fastjson

__all__ = [
    "SCALED_RESOURCES",
    "SCALE_KEY_PREFIX",
    "is_scale_key",
    "parse_scale_key",
    "replica_shape",
    "scale_key",
    "spec_replicas",
    "spec_replicas_json",
]

SCALE_KEY_PREFIX: Final = "scale:"

#: (group, resource) of the built-in kinds whose `scale` subresource maps to `spec.replicas`; a
#: custom resource's scale may map elsewhere (`specReplicasPath`), so it keeps no scale key.
SCALED_RESOURCES: Final = frozenset(
    {
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("", "replicationcontrollers"),
    }
)


def scale_key(previous_rv: str, replicas: int) -> str:
    """The key of the version made from `previous_rv` with `replicas` replicas."""
    return f"{SCALE_KEY_PREFIX}{previous_rv}:{replicas}"


def is_scale_key(value: str) -> bool:
    return value.startswith(SCALE_KEY_PREFIX)


def parse_scale_key(value: str) -> tuple[str, int] | None:
    """(the version the scale started from, its new count) of a scale key; None if it is not one."""
    if not value.startswith(SCALE_KEY_PREFIX):
        return None
    previous_rv, _, count = value[len(SCALE_KEY_PREFIX) :].rpartition(":")
    if not previous_rv or not count.isdigit() or not count.isascii():
        return None
    return previous_rv, int(count)


def spec_replicas(obj: object) -> int | None:
    """`spec.replicas` of an object (or a Scale) when it is an integer; None otherwise."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    replicas = spec.get("replicas") if isinstance(spec, Mapping) else None
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None


def spec_replicas_json(object_json: bytes) -> int | None:
    """`spec.replicas` of a serialised object; None when it has none or is not JSON."""
    try:
        return spec_replicas(fastjson.loads(object_json))
    except ValueError:
        return None


def replica_shape(object_json: bytes) -> bytes | None:
    """A digest of a mirrored object without its `spec.replicas`; None when it has no count.

    Two versions of one object with the same shape differ at most in their count. A watch gap
    whose snapshot shows an object of its shape before the gap was changed only by scales (or
    by writes that were undone), so a scale fact may name it (docs/attribution.md, "Scale facts").
    The object is the watch's sanitized canonical JSON, so equal content gives equal bytes.
    """
    try:
        obj = fastjson.loads(object_json)
    except ValueError:
        return None
    if spec_replicas(obj) is None:
        return None
    spec = {key: value for key, value in obj["spec"].items() if key != "replicas"}
    rest = {key: value for key, value in obj.items() if key != "spec"}
    return hashlib.blake2b(fastjson.canonical_json([rest, spec]), digest_size=16).digest()
