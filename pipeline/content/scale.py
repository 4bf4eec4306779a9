"""The scale key: the object version a write through the `scale` subresource makes.

A Scale AdmissionReview carries the parent's uid and its resourceVersion before the write
(`oldObject`), and the new replica count, but never the parent's content or the version the write
will get, so the content key cannot name it. The version a scale makes is the one directly after
the old resourceVersion whose `spec.replicas` is the new count; the router knows an event's
predecessor (the object's previous version on the watch) and its `spec.replicas`, so both sides
can name the version by the same key (docs/attribution.md, "Scale facts"). The prefix keeps a scale
key from ever equalling a resourceVersion or a content key in the fact index's exact slots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

__all__ = [
    "SCALED_RESOURCES",
    "SCALE_KEY_PREFIX",
    "is_scale_key",
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


def spec_replicas(obj: object) -> int | None:
    """`spec.replicas` of an object (or a Scale) when it is an integer; None otherwise."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    replicas = spec.get("replicas") if isinstance(spec, Mapping) else None
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None


def spec_replicas_json(object_json: bytes) -> int | None:
    """`spec.replicas` of a serialised object; None when it has none or is not JSON."""
    try:
        return spec_replicas(json.loads(object_json))
    except ValueError:
        return None
