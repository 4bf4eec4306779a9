"""The fields of a watch line that a plain watch stream reads; its decoder skips the rest.

A live object's line is mostly what sanitize drops (`metadata.managedFields`, `status`): parsed
into dicts, that was built only to be thrown away, and it was the largest part of the parse.
Decoded to these shapes, an event holds the sanitize allowlist's fields
(`pipeline.content.sanitize`) and those the stream reads besides: the metadata's `uid`,
`resourceVersion` and `deletionTimestamp`, an `ERROR` event's `code`. A test pins the shapes to
the allowlist. A stream that hands the whole object on (the configuration controller's
`payload`) decodes with `fastjson.loads` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypedDict

from pipeline.content.fastjson import decoder

__all__ = ["WatchLine", "WatchMetadata", "WatchObject", "decode_watch_line"]


class WatchMetadata(TypedDict, total=False):
    """The metadata fields sanitize keeps, and those the watch stream reads."""

    name: Any
    namespace: Any
    labels: Any
    annotations: Any
    uid: Any
    resourceVersion: Any
    deletionTimestamp: Any


class WatchObject(TypedDict, total=False):
    """The top-level fields sanitize keeps, and a `Status`'s `code` (an `ERROR` event's)."""

    apiVersion: Any
    kind: Any
    metadata: WatchMetadata
    spec: Any
    data: Any
    binaryData: Any
    rules: Any
    subjects: Any
    roleRef: Any
    webhooks: Any
    template: Any
    involvedObject: Any
    reason: Any
    message: Any
    type: Any
    eventTime: Any
    code: Any


class WatchLine(TypedDict, total=False):
    """One watch event: its type and object."""

    type: Any
    object: WatchObject


#: A watch line as `fastjson.loads` reads it, without the fields no plain stream reads.
decode_watch_line: Final[Callable[[bytes], Any]] = decoder(WatchLine)
