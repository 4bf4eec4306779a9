"""The custom resource kinds: names, identity, and reading one object from YAML or the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "API_VERSION",
    "CONFIG_KINDS",
    "GROUP",
    "VERSION",
    "CustomResource",
    "CustomResourceError",
    "Kind",
    "ObjectRef",
    "effective_name",
    "parse_object",
]

GROUP = "configbutler.ai"
VERSION = "v1alpha3"
API_VERSION = f"{GROUP}/{VERSION}"


class Kind(StrEnum):
    """The kinds this project reads."""

    GIT_PROVIDER = "GitProvider"
    GIT_TARGET = "GitTarget"
    WATCH_RULE = "WatchRule"
    CLUSTER_WATCH_RULE = "ClusterWatchRule"
    COMMIT_REQUEST = "CommitRequest"
    CLUSTER_PROVIDER = "ClusterProvider"

    @property
    def plural(self) -> str:
        return f"{self.value.lower()}s"

    @property
    def namespaced(self) -> bool:
        return self not in (Kind.CLUSTER_WATCH_RULE, Kind.CLUSTER_PROVIDER)


#: The kinds compiled into the effective configuration. A CommitRequest is not configuration but
#: a one-shot action on a target (pipeline/customresources/commitrequest.py).
CONFIG_KINDS = frozenset(Kind) - {Kind.COMMIT_REQUEST}


class CustomResourceError(ValueError):
    """An object is not a readable custom resource of a known kind (the message names the field)."""


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """Which object: kind, namespace ("" for ClusterWatchRule) and name."""

    kind: Kind
    namespace: str
    name: str

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind.value} {where}"


@dataclass(frozen=True, slots=True)
class CustomResource:
    """One object: its identity, the generation its spec is at, and the spec as written.

    `created_at` (metadata.creationTimestamp; None offline, where objects have none yet) decides
    which of two targets writing one folder keeps it: the older. `status` is kept for the kinds
    whose status says what was already done (a CommitRequest already sent), else empty.
    """

    ref: ObjectRef
    spec: dict[str, Any]
    generation: int = 0
    uid: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    status: dict[str, Any] = field(default_factory=dict)


def effective_name(namespace: str, name: str, home_namespace: str) -> str:
    """The provider or target name an object stands for in the effective configuration.

    Objects in the home namespace (the controller's own) keep their name, so the YAML file's names
    survive an export and re-import; objects elsewhere are qualified as `namespace/name`, so two
    tenants' targets of the same name never collide. The rule looks at no other object, so adding
    an object never renames an existing target (which would restart its streams).
    """
    return name if namespace == home_namespace else f"{namespace}/{name}"


def parse_object(document: Any) -> CustomResource:
    """Read one object; raises CustomResourceError naming the field that is wrong."""
    if not isinstance(document, dict):
        raise CustomResourceError("an object must be a mapping")
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        raise CustomResourceError(f"apiVersion: expected {API_VERSION}, got {api_version!r}")
    raw_kind = document.get("kind")
    try:
        kind = Kind(str(raw_kind))
    except ValueError:
        known = ", ".join(k.value for k in Kind)
        raise CustomResourceError(f"kind: expected one of {known}, got {raw_kind!r}") from None
    metadata = document.get("metadata")
    if (
        isinstance(metadata, dict)
        and not metadata.get("name")
        and isinstance(metadata.get("generateName"), str)
    ):
        # a file for `kubectl create` (gitops-reverser's CommitRequest sample): the apiserver names
        # it; offline it is checked under its prefix
        metadata = {**metadata, "name": metadata["generateName"]}
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise CustomResourceError(f"{kind.value}: metadata.name is required")
    name = metadata["name"]
    namespace = metadata.get("namespace") or ""
    if not isinstance(namespace, str):
        raise CustomResourceError(f"{kind.value} {name}: metadata.namespace must be a string")
    if kind.namespaced and not namespace:
        raise CustomResourceError(f"{kind.value} {name}: metadata.namespace is required")
    if not kind.namespaced and namespace:
        raise CustomResourceError(f"{kind.value} {name}: is cluster-scoped; remove metadata.namespace")
    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise CustomResourceError(f"{kind.value} {name}: spec is required and must be a mapping")
    annotations = metadata.get("annotations") or {}
    created = metadata.get("creationTimestamp")
    created_at = None
    if created is not None:
        try:
            created_at = datetime.fromisoformat(str(created))
        except ValueError:
            raise CustomResourceError(
                f"{kind.value} {name}: metadata.creationTimestamp {created!r} is not an RFC 3339 time"
            ) from None
        if created_at.tzinfo is None:
            raise CustomResourceError(f"{kind.value} {name}: metadata.creationTimestamp needs a time zone")
    return CustomResource(
        ref=ObjectRef(kind, namespace, name),
        spec=spec,
        generation=int(metadata.get("generation") or 0),
        uid=str(metadata.get("uid") or ""),
        annotations={str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {},
        created_at=created_at,
        status=status if isinstance(status := document.get("status"), dict) else {},
    )
