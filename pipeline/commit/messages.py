"""Commit messages: subjects that name the objects changed, and the trailers recovery depends on.

`Reverser-Offset: <partition>:<offset>` is the last branch-work record applied in the commit; after a
crash the worker reads it back from the branch tip and skips that work. `Reverser-Branch` names the
FIFO the offset belongs to, so a branch forked from another managed branch is never mistaken for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "BRANCH_TRAILER",
    "OFFSET_TRAILER",
    "ChangedObject",
    "api_version",
    "parse_offset",
    "reconcile_message",
    "window_message",
]

OFFSET_TRAILER = "Reverser-Offset"
BRANCH_TRAILER = "Reverser-Branch"
ATTRIBUTION_TRAILER = "Reverser-Attribution"
_OFFSET = re.compile(r"^(\d+):(\d+)$")


@dataclass(frozen=True, slots=True)
class ChangedObject:
    """One object a window changed, as named in the message."""

    operation: str
    group: str
    version: str
    resource: str
    namespace: str
    name: str

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.operation} {api_version(self.group, self.version)}/{self.resource}/{where}"


def api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _trailers(
    provider: str, branch: str, attributions: Iterable[str], partition: int, offset: int
) -> list[str]:
    lines = [f"{ATTRIBUTION_TRAILER}: {a}" for a in attributions]
    lines.append(f"{BRANCH_TRAILER}: {provider} {branch}")
    lines.append(f"{OFFSET_TRAILER}: {partition}:{offset}")
    return lines


def window_message(
    objects: Sequence[ChangedObject],
    author_label: str,
    target: str,
    attributions: Iterable[str],
    provider: str,
    branch: str,
    partition: int,
    offset: int,
) -> str:
    """`[OP] apiVersion/resource/name` for one object, `<author> on <target>: N resource(s)` for more.

    The body lists every object; the trailers carry attribution tiers and the work offset.
    """
    if len(objects) == 1:
        one = objects[0]
        subject = f"[{one.operation}] {api_version(one.group, one.version)}/{one.resource}/{one.name}"
    else:
        subject = f"{author_label} on {target}: {len(objects)} resource(s)"
    body = [o.describe() for o in objects]
    trailers = _trailers(provider, branch, attributions, partition, offset)
    return "\n".join([subject, "", *body, "", *trailers]) + "\n"


def reconcile_message(
    count: int,
    resource: str,
    revision: str,
    target: str,
    provider: str,
    branch: str,
    partition: int,
    offset: int,
    changed: Sequence[str],
) -> str:
    """`reconciled N <resource> (last resourceVersion: R)`, listing the paths a snapshot changed."""
    subject = f"reconciled {count} {resource or 'resources'}"
    if revision:
        subject += f" (last resourceVersion: {revision})"
    trailers = _trailers(provider, branch, [f"snapshot {target}"], partition, offset)
    return "\n".join([subject, "", *changed, "", *trailers]) + "\n"


def parse_offset(trailers: dict[str, list[str]], provider: str, branch: str) -> tuple[int, int] | None:
    """The `(partition, offset)` of a commit this FIFO made, or None for anybody else's commit."""
    offsets = trailers.get(OFFSET_TRAILER)
    if not offsets:
        return None
    owners = trailers.get(BRANCH_TRAILER, [])
    if owners and f"{provider} {branch}" not in owners:
        return None
    match = _OFFSET.match(offsets[-1].strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))
