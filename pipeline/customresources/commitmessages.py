"""gitops-reverser's `spec.commit.message` as a target's Go message templates.

GR's v0.41 line sets `eventTemplate`, `groupTemplate` and `reconcileTemplate` on the GitProvider
(every target of that provider uses them); later releases set them on the GitTarget. Both are
read: a GitTarget's own template of a kind wins over its provider's. Each is checked as the
commit worker will render it (the supported Go subset, rendered on sample data of its kind), so
a template the worker could not render is an error naming the field the user wrote, with the
construct or field it names (`spec.commit.message.eventTemplate: {{define}} is not supported`).
"""

from __future__ import annotations

from typing import Any

from pipeline.customresources.problems import FieldProblem
from pipeline.gotemplate.commitdata import GoTemplateError, MessageKind, check

__all__ = ["SUPPORTED_PATHS", "message_templates"]

_FIELDS = {
    "eventTemplate": MessageKind.EVENT,
    "groupTemplate": MessageKind.GROUP,
    "reconcileTemplate": MessageKind.RECONCILE,
}
SUPPORTED_PATHS = tuple(f"spec.commit.message.{name}" for name in _FIELDS)
"""The fields read here (any other field of `spec.commit.message` is reported unsupported)."""


def message_templates(spec: dict[str, Any], errors: list[FieldProblem]) -> dict[str, str]:
    """`spec.commit.message`'s templates as `commit_message` fields (`event_template`, ...).

    A template that does not check is appended to `errors` and left out.
    """
    commit = spec.get("commit")
    message = commit.get("message") if isinstance(commit, dict) else None
    if message is None:
        return {}
    if not isinstance(message, dict):
        errors.append(FieldProblem("spec.commit.message", "must be a mapping"))
        return {}
    found: dict[str, str] = {}
    for name, kind in _FIELDS.items():
        text = message.get(name)
        if text is None:
            continue
        path = f"spec.commit.message.{name}"
        if not isinstance(text, str):
            errors.append(FieldProblem(path, "must be a string (a Go text/template)"))
            continue
        try:
            check(kind, text)
        except GoTemplateError as exc:
            errors.append(FieldProblem(path, f"Go template: {exc}"))
            continue
        found[f"{kind}_template"] = text
    return found
