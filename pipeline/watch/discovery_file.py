"""API discovery read from a file instead of an apiserver, for `reverser watch-rules --discovery`.

Checking watch rules should not need a live cluster: in CI, before a cluster exists, or in the demo,
whose recording stands in for one. The file holds what the apiserver's discovery serves, one
`APIResourceList` document per group version, exactly as `kubectl get --raw /api/v1` and `kubectl get
--raw /apis/apps/v1` print them (JSON is YAML; documents separated by `---`). The first document of a
group is its preferred version, as `/apis` lists them. Subresources (`pods/log`) are skipped, as live
discovery skips them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pipeline.exitcodes import CommandError, usage_error
from pipeline.kube.client import ApiResource

__all__ = ["read_discovery"]


def read_discovery(path: Path) -> dict[tuple[str, str], ApiResource]:
    """The resources of `path`, keyed like `KubeClient.discover` by (group, resource).

    An unreadable file raises `OSError` (the command line words it); a document that is not an
    `APIResourceList` raises a usage error naming the file, the document and the field."""
    text = path.read_text(encoding="utf-8")
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise usage_error(f"{path}: not YAML: {exc}") from None
    if not documents:
        raise usage_error(f"{path}: holds no APIResourceList document")
    found: dict[tuple[str, str], ApiResource] = {}
    for number, document in enumerate(documents, start=1):
        for api in _resources(document, f"{path}: document {number}"):
            found.setdefault((api.group, api.resource), api)  # the group's first version wins
    return found


def _resources(document: Any, where: str) -> list[ApiResource]:
    if not isinstance(document, Mapping) or document.get("kind") != "APIResourceList":
        raise _bad(where, "kind", "must be APIResourceList (the output of `kubectl get --raw /api/v1`)")
    group_version = document.get("groupVersion")
    if not isinstance(group_version, str) or not group_version or group_version.count("/") > 1:
        raise _bad(where, "groupVersion", "must be VERSION or GROUP/VERSION")
    group, _, version = group_version.rpartition("/")
    entries = document.get("resources")
    if not isinstance(entries, list):
        raise _bad(where, "resources", "must be a list")
    resources: list[ApiResource] = []
    for index, entry in enumerate(entries):
        field = f"resources.{index}"
        if not isinstance(entry, Mapping):
            raise _bad(where, field, "must be a mapping")
        name, kind, verbs = entry.get("name"), entry.get("kind"), entry.get("verbs", [])
        if not isinstance(name, str) or not name:
            raise _bad(where, f"{field}.name", "must be a resource name")
        if "/" in name:
            continue
        if not isinstance(kind, str) or not kind:
            raise _bad(where, f"{field}.kind", "must be a kind")
        if not isinstance(entry.get("namespaced"), bool):
            raise _bad(where, f"{field}.namespaced", "must be true or false")
        if not isinstance(verbs, list) or not all(isinstance(v, str) for v in verbs):
            raise _bad(where, f"{field}.verbs", "must be a list of verbs")
        resources.append(ApiResource(group, version, name, kind, bool(entry["namespaced"]), frozenset(verbs)))
    return resources


def _bad(where: str, field: str, rule: str) -> CommandError:
    return usage_error(f"{where}: {field}: {rule}")
