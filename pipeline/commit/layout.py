"""Where an object lives in the repository: the canonical path layout of docs/commit-worker.md ("Files")."""

from __future__ import annotations

from pipeline.gitnames import GitNameError as LayoutError
from pipeline.gitnames import is_git_dir, normalize_target_path
from pipeline.models import GroupResource
from pipeline.sealing import is_sensitive

__all__ = [
    "CLUSTER_DIR",
    "LayoutError",
    "canonical_path",
    "in_scope",
    "is_sealed_path",
    "is_sensitive",
    "normalize_target_path",
    "object_of",
]

CLUSTER_DIR = "_cluster"
SEALED_SUFFIX = ".sops.yaml"


def _segment(value: str, what: str) -> str:
    if not value or "/" in value or value in (".", "..") or "\x00" in value or is_git_dir(value):
        raise LayoutError(f"{what} {value!r} cannot be a path segment")
    return value


def _type_dir(group: str, resource: str) -> str:
    resource = _segment(resource, "resource")
    return f"{_segment(group, 'group')}/{resource}" if group else resource


def canonical_path(
    target_path: str,
    group: str,
    resource: str,
    namespace: str,
    name: str,
    sensitive: frozenset[GroupResource] = frozenset(),
) -> str:
    """`[path/]{namespace|_cluster}/[group/]resource/name.yaml` (`.sops.yaml` for sensitive types).

    `sensitive` holds the target's extra sensitive types; Secrets always are.
    """
    scope_dir = _segment(namespace, "namespace") if namespace else CLUSTER_DIR
    suffix = SEALED_SUFFIX if is_sensitive(group, resource, sensitive) else ".yaml"
    relative = f"{scope_dir}/{_type_dir(group, resource)}/{_segment(name, 'name')}{suffix}"
    return f"{target_path}/{relative}" if target_path else relative


def is_sealed_path(path: str) -> bool:
    """Whether a repository file holds a sensitive object (its content is a SOPS document)."""
    return path.endswith(SEALED_SUFFIX)


def in_scope(path: str, target_path: str, group: str, resource: str, scope: str) -> bool:
    """Whether a repository file is a document of `group/resource` inside a snapshot's scope.

    A namespace scope covers `<ns>/[group/]resource/*.yaml` only (a sweep never reaches another
    namespace); the cluster-wide scope "" covers that type in every namespace and in `_cluster`.
    """
    prefix = f"{target_path}/" if target_path else ""
    if not path.startswith(prefix):
        return False
    parts = path[len(prefix) :].split("/")
    type_parts = [group, resource] if group else [resource]
    if len(parts) != len(type_parts) + 2 or parts[1:-1] != type_parts:
        return False
    if not parts[-1].endswith(".yaml"):
        return False
    return not scope or parts[0] == scope


def object_of(path: str, target_path: str) -> tuple[str, str]:
    """`(namespace, name)` of the object a canonical path holds ("" namespace for `_cluster`).

    The inverse of `canonical_path` for files `in_scope` of some type.
    """
    prefix = f"{target_path}/" if target_path else ""
    parts = path[len(prefix) :].split("/")
    file_name = parts[-1]
    suffix = SEALED_SUFFIX if file_name.endswith(SEALED_SUFFIX) else ".yaml"
    return ("" if parts[0] == CLUSTER_DIR else parts[0]), file_name[: -len(suffix)]
