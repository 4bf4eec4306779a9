"""Commit messages: subjects that name the objects changed, and the trailers recovery depends on.

`Reverser-Offset: <partition>:<offset>` is the last branch-work record applied in the commit; after a
crash the worker reads it back from the branch tip and skips that work. `Reverser-Branch` names the
FIFO the offset belongs to, so a branch forked from another managed branch is never mistaken for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.config import CommitMessageSettings
from pipeline.msgtemplate import render_body, render_subject

__all__ = [
    "BRANCH_TRAILER",
    "OFFSET_TRAILER",
    "ChangedObject",
    "api_version",
    "parse_offset",
    "reconcile_message",
    "template_values",
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


def _common(values: Iterable[str], mixed: str) -> str:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else mixed


def template_values(objects: Sequence[ChangedObject], author_label: str, target: str) -> dict[str, str]:
    """The variables a message template sees for one window (see docs/commit-worker.md)."""
    single = objects[0] if len(objects) == 1 else None
    return {
        "operation": _common((o.operation for o in objects), "MIXED"),
        "resource": _common((o.resource for o in objects), "resources"),
        "api_version": _common((api_version(o.group, o.version) for o in objects), ""),
        "namespace": _common((o.namespace for o in objects), ""),
        "name": single.name if single is not None else "",
        "author": author_label,
        "count": str(len(objects)),
        "target": target,
        "objects": "\n".join(o.describe() for o in objects),
    }


def window_message(
    objects: Sequence[ChangedObject],
    author_label: str,
    target: str,
    attributions: Iterable[str],
    provider: str,
    branch: str,
    partition: int,
    offset: int,
    template: CommitMessageSettings | None = None,
) -> str:
    """`[OP] apiVersion/resource/name` for one object, `<author> on <target>: N resource(s)` for more.

    The body lists every object; the trailers carry attribution tiers and the work offset. A
    target's template replaces the subject and/or body; the trailers are appended regardless.
    """
    if len(objects) == 1:
        one = objects[0]
        subject = f"[{one.operation}] {api_version(one.group, one.version)}/{one.resource}/{one.name}"
    else:
        subject = f"{author_label} on {target}: {len(objects)} resource(s)"
    body = [o.describe() for o in objects]
    if template is not None:
        values = template_values(objects, author_label, target)
        if template.subject is not None:
            subject = render_subject(template.subject, values) or subject
        if template.body is not None:
            body = render_body(template.body, values)
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
