"""The embedded log's small JSON files (topic specs, group offsets, transaction intents).

Each is replaced atomically, so a crash leaves either the old or the new content.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from pipeline.log.api import (
    TopicPartition,
    TopicSpec,
)
from pipeline.log.embedded.segments import fsync_directory

DAMAGED_FILES = Counter(
    "reverser_log_embedded_damaged_files",
    "Group offset or transaction files found empty or corrupt when the embedded log was opened.",
    ["kind"],
)


def spec_to_json(spec: TopicSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "partitions": spec.partitions,
        "cleanup_policy": spec.cleanup_policy,
        "retention_ms": spec.retention_ms,
        "retention_bytes": spec.retention_bytes,
        "segment_ms": spec.segment_ms,
        "log_append_time": spec.log_append_time,
        "max_message_bytes": spec.max_message_bytes,
    }


def write_json(path: Path, data: object, fsync: bool, *, keep_previous: bool = False) -> None:
    """Replace `path` atomically, so a crash leaves either the old or the new content.

    With `fsync`, the content and then the directory entry are on disk when this returns. With
    `keep_previous`, the replaced content stays as `<path>.prev`, the fallback when `path` is found
    damaged (a power loss without fsync can leave a renamed file empty).
    """
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        json.dump(data, out)
        out.flush()
        if fsync:
            os.fsync(out.fileno())
    if keep_previous and path.exists():
        os.replace(path, previous_version(path))
    os.replace(tmp, path)
    if fsync:
        fsync_directory(path.parent)


def previous_version(path: Path) -> Path:
    return path.with_name(path.name + ".prev")


def read_json(path: Path) -> Any:
    """The JSON content of `path`; ValueError (with the reason) when it is empty or not JSON."""
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError("the file is empty")
    return json.loads(text)


def group_offsets_of(data: Any) -> dict[TopicPartition, int]:
    """Committed offsets from a group file's content; ValueError when it is not one."""
    try:
        return {TopicPartition(str(t), int(p)): int(o) for t, p, o in data["offsets"]}
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"not a group offsets file ({type(exc).__name__}: {exc})") from exc
