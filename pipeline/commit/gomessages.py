"""Commit messages written by gitops-reverser's Go templates, for the commits GR makes with them.

GR renders a window of one object with `eventTemplate`, a window of several with
`groupTemplate` and a snapshot (its reconcile) with `reconcileTemplate`; the worker makes those
same three commits (a closed window, a finished snapshot), so each template maps onto one. The
data is GR's: the raw username (empty when nobody was attributed: configured-author mode and
unresolved authors render as GR renders them, without the `unknown` placeholder), the GitTarget's
own name (the object's, without the namespace this project adds outside its home namespace).

Every value from the cluster is cleaned with `clean_line` before rendering, so a name or
username can never add a line or a trailer. A template that fails on the data at hand (an
`index` out of range, a map key a window lacks) or renders nothing is not a lost commit: GR's
default template of that kind writes the message, logged and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from pipeline.commit import metrics
from pipeline.config import CommitMessageSettings
from pipeline.gotemplate.commitdata import (
    DEFAULTS,
    GoTemplateError,
    MessageKind,
    Resource,
    effective,
    event_data,
    group_data,
    reconcile_data,
    render,
)
from pipeline.gotemplate.values import GoStruct
from pipeline.msgtemplate import clean_line, clean_rendered
from pipeline.operation import Operation

__all__ = ["reconcile_lines", "window_lines"]

logger = logging.getLogger(__name__)


class _Object(Protocol):
    """An object a window changed (`messages.ChangedObject`)."""

    @property
    def operation(self) -> Operation: ...
    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


def _object_name(target: str) -> str:
    """The GitTarget's own name: targets outside the home namespace are named `namespace/name`."""
    return clean_line(target.rsplit("/", 1)[-1])


def _resource(obj: _Object) -> Resource:
    return Resource(
        obj.operation,
        clean_line(obj.group),
        clean_line(obj.version),
        clean_line(obj.resource),
        clean_line(obj.namespace),
        clean_line(obj.name),
    )


def window_lines(
    template: CommitMessageSettings | None, objects: Sequence[_Object], username: str, target: str
) -> list[str] | None:
    """The message lines of a window by the target's event or group template; None without one."""
    if template is None or not objects:
        return None
    text = template.event_template if len(objects) == 1 else template.group_template
    if text is None:
        return None
    who = clean_line(username)
    if len(objects) == 1:
        return _lines(
            MessageKind.EVENT, text, event_data(_resource(objects[0]), who, _object_name(target)), target
        )
    resources = [_resource(o) for o in objects]
    return _lines(MessageKind.GROUP, text, group_data(resources, who, _object_name(target)), target)


def reconcile_lines(
    template: CommitMessageSettings | None,
    count: int,
    target: str,
    group: str,
    version: str,
    resource: str,
    revision: str,
) -> list[str] | None:
    """The message lines of a snapshot's commit by the reconcile template; None without one."""
    if template is None or template.reconcile_template is None:
        return None
    data = reconcile_data(
        count,
        _object_name(target),
        clean_line(group),
        clean_line(version),
        clean_line(resource),
        clean_line(revision),
    )
    return _lines(MessageKind.RECONCILE, template.reconcile_template, data, target)


def _lines(kind: MessageKind, text: str, data: GoStruct, target: str) -> list[str]:
    try:
        lines = clean_rendered(render(effective(kind, text), data))
        why = "rendered nothing"
    except GoTemplateError as exc:
        lines, why = [], str(exc)
    if lines:
        return lines
    logger.warning(
        "target %s: the %s template failed (%s); GR's default template wrote the message", target, kind, why
    )
    metrics.MESSAGE_FALLBACKS.labels(target, kind).inc()
    return clean_rendered(render(DEFAULTS[kind], data))
