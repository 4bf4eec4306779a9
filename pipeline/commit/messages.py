"""Commit messages: subjects that name the objects changed, and the trailers recovery depends on.

`Reverser-Offset: <partition>:<offset>` is the last branch-work record applied in the commit; after a
crash the worker reads it back from the branch tip and skips that work. `Reverser-Branch` names the
FIFO the offset belongs to, so a branch forked from another managed branch is never mistaken for it.
Anyone who can push can write such trailers, so an offset counts only from a commit with the
worker's committer and branch trailer, and only below the partition's log-end offset.

Usernames, names and namespaces come from the cluster; every line of a message, and every value a
template substitutes, passes through `pipeline.msgtemplate.clean_line` (the one cleaner), so a
newline in a username cannot start a trailer and a NUL cannot produce a commit that fsck-checking
remotes reject.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pipeline.commit.gomessages import reconcile_lines, window_lines
from pipeline.commit.position import LogPosition
from pipeline.config import CommitMessageSettings
from pipeline.msgtemplate import TemplateValue, clean_line, render_body, render_subject
from pipeline.operation import Operation
from pipeline.prune import Prune

__all__ = [
    "BRANCH_TRAILER",
    "OFFSET_TRAILER",
    "ChangedObject",
    "Reconciled",
    "api_version",
    "names_fifo",
    "parse_offset",
    "reconcile_message",
    "template_values",
    "trusted_offset",
    "window_message",
]

OFFSET_TRAILER = "Reverser-Offset"
BRANCH_TRAILER = "Reverser-Branch"
ATTRIBUTION_TRAILER = "Reverser-Attribution"
_OFFSET = re.compile(r"^(\d+):(\d+)$")


@dataclass(frozen=True, slots=True)
class ChangedObject:
    """One object a window changed, as named in the message."""

    operation: Operation
    group: str
    version: str
    resource: str
    namespace: str
    name: str

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return clean_line(f"{self.operation} {self._type()}/{where}")

    def subject(self) -> str:
        return clean_line(f"[{self.operation}] {self._type()}/{self.name}")

    def _type(self) -> str:
        return f"{api_version(self.group, self.version)}/{self.resource}"


def api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _trailers(at: LogPosition, attributions: Iterable[str], *, claims: bool = True) -> list[str]:
    """The attribution, branch and offset trailers; without `claims` the commit names its FIFO but
    claims no offset (a snapshot's part: a restart must not skip the snapshot's begin)."""
    lines = [f"{ATTRIBUTION_TRAILER}: {clean_line(a)}" for a in attributions]
    lines.append(f"{BRANCH_TRAILER}: {clean_line(at.provider)} {clean_line(at.branch)}")
    if claims:
        lines.append(f"{OFFSET_TRAILER}: {at.partition}:{at.offset}")
    return lines


def _common(values: Iterable[str], mixed: str) -> str:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else mixed


def template_values(
    objects: Sequence[ChangedObject], author_label: str, target: str
) -> dict[str, TemplateValue]:
    """The variables a message template sees for one window (see docs/commit-worker.md).

    Values are as the cluster gave them; rendering cleans each one, so none can add a line.
    """
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
        "objects": tuple(o.describe() for o in objects),
    }


def window_message(
    objects: Sequence[ChangedObject],
    author_label: str,
    target: str,
    attributions: Iterable[str],
    at: LogPosition,
    template: CommitMessageSettings | None = None,
    username: str = "",
) -> str:
    """`[OP] apiVersion/resource/name` for one object, `<author> on <target>: N resource(s)` for more.

    The body lists every object; the trailers carry attribution tiers and the work offset. A
    target's template replaces the subject and/or body, a Go template (gitops-reverser's, with
    the raw `username`) the whole text; the trailers are appended regardless.
    """
    trailers = _trailers(at, attributions)
    written = window_lines(template, objects, username, target)
    if written is not None:
        return "\n".join([*written, "", *trailers]) + "\n"
    if len(objects) == 1:
        subject = objects[0].subject()
    else:
        subject = clean_line(f"{author_label} on {target}: {len(objects)} resource(s)")
    body = [o.describe() for o in objects]
    if template is not None:
        values = template_values(objects, author_label, target)
        if template.subject is not None:
            subject = render_subject(template.subject, values) or subject
        if template.body is not None:
            body = render_body(template.body, values)
    return "\n".join([subject, "", *body, "", *trailers]) + "\n"


class Reconciled(NamedTuple):
    """What one snapshot reconciled: the type listed and the last resourceVersion it saw."""

    group: str
    version: str
    resource: str
    revision: str


def reconcile_message(
    what: Reconciled,
    target: str,
    at: LogPosition,
    changed: Sequence[str],
    template: CommitMessageSettings | None = None,
    *,
    claims: bool = True,
) -> str:
    """`reconciled N <resource> (last resourceVersion: R)`, listing the N paths a snapshot changed;
    a target's Go `reconcile_template` writes the text instead (the trailers follow either way).
    A part of a snapshot committed in parts names its FIFO but claims no offset (`claims`)."""
    trailers = _trailers(at, [f"snapshot {target}"], claims=claims)
    count = len(changed)
    written = reconcile_lines(template, count, target, what.group, what.version, what.resource, what.revision)
    if written is not None:
        return "\n".join([*written, "", *trailers]) + "\n"
    subject = f"reconciled {count} {what.resource or 'resources'}"
    if what.revision:
        subject += f" (last resourceVersion: {what.revision})"
    paths = [clean_line(path) for path in changed]
    return "\n".join([clean_line(subject), "", *paths, "", *trailers]) + "\n"


def retire_message(
    target: str,
    folder: str,
    prune: Prune,
    reason: str,
    at: LogPosition,
    changed: Sequence[str],
) -> str:
    """`removed <folder>/ of deleted target <target> (prune <mode>)`: why, every path, the trailers."""
    subject = f"removed {folder or '.'}/ of deleted target {target} (prune {prune})"
    why = f"{reason}; its prune mode {prune} removes what it wrote."
    trailers = _trailers(at, [f"deleted {target}"])
    paths = [clean_line(path) for path in changed]
    return "\n".join([clean_line(subject), "", clean_line(why), "", *paths, "", *trailers]) + "\n"


def rebuild_message(target: str, source: str, changed: Sequence[str]) -> str:
    """`rebuilt <target> from <source>: N change(s)`, listing every changed path (no offset trailer:
    a rebuild consumed no branch-work record)."""
    subject = f"rebuilt {target} from {source}: {len(changed)} change(s)"
    return "\n".join([clean_line(subject), "", *(clean_line(p) for p in changed)]) + "\n"


def names_fifo(trailers: dict[str, list[str]], provider: str, branch: str) -> bool:
    """Whether a commit's `Reverser-Branch` trailer names this FIFO (whether or not it claims an offset)."""
    return f"{provider} {branch}" in trailers.get(BRANCH_TRAILER, [])


def parse_offset(trailers: dict[str, list[str]], provider: str, branch: str) -> tuple[int, int] | None:
    """The `(partition, offset)` a commit claims for this FIFO, or None when it claims none.

    Without a `Reverser-Branch` trailer naming this FIFO the commit claims nothing.
    """
    offsets = trailers.get(OFFSET_TRAILER)
    if not offsets or f"{provider} {branch}" not in trailers.get(BRANCH_TRAILER, []):
        return None
    match = _OFFSET.match(offsets[-1].strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def trusted_offset(
    trailers: dict[str, list[str]],
    committer: str,
    own_committer: str,
    provider: str,
    branch: str,
    log_ends: Mapping[int, int] | None,
) -> tuple[tuple[int, int] | None, str | None]:
    """`(offset, None)` for a trailer the worker may skip work by, `(None, why)` for one it must ignore.

    `(None, None)` means the commit claims nothing for this FIFO. `log_ends` maps each branch-work
    partition to its log-end offset (None: not known, the bound is not checked).
    """
    if trailers.get(OFFSET_TRAILER) and not trailers.get(BRANCH_TRAILER):
        return None, f"{OFFSET_TRAILER} without {BRANCH_TRAILER}"
    found = parse_offset(trailers, provider, branch)
    if found is None:
        return None, None
    if committer != own_committer:
        return None, f"committed by {clean_line(committer)!r}, not by the worker"
    if log_ends is not None:
        end = log_ends.get(found[0])
        if end is None or found[1] >= end:
            return None, f"beyond the end of branch-work partition {found[0]} ({end})"
    return found, None
