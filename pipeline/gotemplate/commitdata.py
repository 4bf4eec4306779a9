"""gitops-reverser's commit message templates: its three kinds, their data and their defaults.

GR (v0.41 line) renders a commit window of one object with `eventTemplate`
(`CommitMessageData`), of several with `groupTemplate` (`GroupedCommitMessageData`), and a
snapshot with `reconcileTemplate` (`ReconcileCommitMessageData`). The values here have exactly
those structs' fields, in their order, so a template reads, fails and prints as it does there.
A template is checked when the configuration is read: it must parse (the supported subset, see
`parse.py`) and render against sample data of its kind, as GR's own validator renders samples,
so an unknown field is refused before any commit is made.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from pipeline.gotemplate.execute import execute
from pipeline.gotemplate.parse import Node, TemplateSyntaxError, parse
from pipeline.gotemplate.values import GoMap, GoSlice, GoStruct, RenderError
from pipeline.operation import Operation

__all__ = [
    "DEFAULTS",
    "GoTemplateError",
    "MessageKind",
    "Resource",
    "check",
    "effective",
    "event_data",
    "group_data",
    "reconcile_data",
    "render",
]

_PACKAGE = "git"


class MessageKind(StrEnum):
    """Which of GR's templates renders a commit."""

    EVENT = "event"
    GROUP = "group"
    RECONCILE = "reconcile"


DEFAULTS = {
    MessageKind.EVENT: "[{{.Operation}}] {{.APIVersion}}/{{.Resource}}/{{.Name}}",
    MessageKind.GROUP: "{{.Author}} on {{.GitTarget}}: {{.Count}} resource(s)",
    MessageKind.RECONCILE: (
        "reconciled {{.Count}} {{if .Resource}}{{.Resource}}{{else}}resources{{end}}"
        "{{if .Revision}} (last resourceVersion: {{.Revision}}){{end}}"
    ),
}


class GoTemplateError(ValueError):
    """A template that does not parse, uses an unsupported construct, or fails on its data."""


@dataclass(frozen=True, slots=True)
class Resource:
    """One object of a commit, as GR's `ResourceRef` names it."""

    operation: Operation
    group: str
    version: str
    resource: str
    namespace: str
    name: str


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def event_data(resource: Resource, username: str, target: str) -> GoStruct:
    """`CommitMessageData`: one object, the raw username (empty when nobody was attributed)."""
    return GoStruct(
        f"{_PACKAGE}.CommitMessageData",
        {
            "Operation": resource.operation,
            "Group": resource.group,
            "Version": resource.version,
            "Resource": resource.resource,
            "Namespace": resource.namespace,
            "Name": resource.name,
            "APIVersion": _api_version(resource.group, resource.version),
            "Username": username,
            "GitTarget": target,
        },
    )


def _ref(resource: Resource) -> GoStruct:
    parts = (resource.group, resource.version, resource.resource, resource.namespace, resource.name)
    text = "/".join(p for p in parts if p)
    return GoStruct(
        f"{_PACKAGE}.ResourceRef",
        {
            "Group": resource.group,
            "Version": resource.version,
            "Resource": resource.resource,
            "Namespace": resource.namespace,
            "Name": resource.name,
        },
        stringer=lambda: text,
    )


def group_data(resources: Sequence[Resource], author: str, target: str) -> GoStruct:
    """`GroupedCommitMessageData`: operations counted, one `ResourceRef` per object in order."""
    operations: dict[str, int] = {}
    for resource in resources:
        operations[resource.operation] = operations.get(resource.operation, 0) + 1
    return GoStruct(
        f"{_PACKAGE}.GroupedCommitMessageData",
        {
            "Author": author,
            "GitTarget": target,
            "Count": len(resources),
            "Operations": GoMap(operations),
            "Resources": GoSlice(f"{_PACKAGE}.ResourceRef", tuple(_ref(r) for r in resources)),
        },
    )


def reconcile_data(
    count: int, target: str, group: str, version: str, resource: str, revision: str
) -> GoStruct:
    """`ReconcileCommitMessageData`: the type fields empty when the snapshot names no type."""
    return GoStruct(
        f"{_PACKAGE}.ReconcileCommitMessageData",
        {
            "Count": count,
            "GitTarget": target,
            "Group": group,
            "Version": version,
            "Resource": resource,
            "APIVersion": _api_version(group, version),
            "Revision": revision,
        },
    )


_GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0")


def effective(kind: MessageKind, text: str | None) -> str:
    """The template GR renders: the configured one trimmed as Go's `strings.TrimSpace` trims,
    the default when that leaves nothing."""
    trimmed = _go_trim(text or "")
    return trimmed or DEFAULTS[kind]


def _go_trim(text: str) -> str:
    def space(ch: str) -> bool:
        return ch in _GO_SPACE or unicodedata.category(ch) in ("Zs", "Zl", "Zp")

    start, end = 0, len(text)
    while start < end and space(text[start]):
        start += 1
    while end > start and space(text[end - 1]):
        end -= 1
    return text[start:end]


@lru_cache(maxsize=256)
def _parsed(text: str) -> tuple[Node, ...]:
    try:
        return parse(text)
    except TemplateSyntaxError as exc:
        raise GoTemplateError(str(exc)) from None


def render(text: str, data: GoStruct) -> str:
    """The template's output for `data`, or GoTemplateError where Go would fail too."""
    try:
        return execute(_parsed(text), data)
    except RenderError as exc:
        raise GoTemplateError(str(exc)) from None


def _samples(kind: MessageKind) -> list[GoStruct]:
    create = Resource(Operation.CREATE, "apps", "v1", "deployments", "default", "example")
    update = Resource(Operation.UPDATE, "", "v1", "configmaps", "default", "settings")
    delete = Resource(Operation.DELETE, "apps", "v1", "deployments", "default", "old")
    if kind is MessageKind.EVENT:
        return [
            event_data(r, user, "example-target")
            for r in (create, delete)
            for user in ("template-validator", "")
        ]
    if kind is MessageKind.GROUP:
        return [
            group_data([create, update, delete], user, "example-target")
            for user in ("template-validator", "")
        ]
    return [
        reconcile_data(1, "example-target", "apps", "v1", "deployments", "12345"),
        reconcile_data(3, "example-target", "", "", "", ""),
    ]


def check(kind: MessageKind, text: str) -> str:
    """`text` when it parses and renders for every sample of its kind, else GoTemplateError."""
    used = effective(kind, text)
    for sample in _samples(kind):
        render(used, sample)
    return text
