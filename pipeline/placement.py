"""gitops-reverser's `placement` templates: where a new object's file goes in a target folder.

A target's `placement` (`targets[].placement` in the configuration, a GitTarget's `spec.placement`)
names a path template per type (`byType["{group}/{version}/{resource}"]`, core types without the
group: `v1/configmaps`) and a `default` for the other types. The module sits below the
configuration so that a template is checked when the configuration loads, and an unknown variable
or a path that leaves the folder is an error naming the field before anything runs;
`pipeline.intent.placement` adds what the folder itself says (its single kustomization).

A template is a path with brace variables, never a program. It names its own extension, stays
inside the target folder, and renders each identity value as one path segment. `{namespace}` and
`{label:key}` take a `|fallback` for the objects that lack one (cluster-scoped objects, unlabelled
ones); a fallback is at most 63 characters of `[A-Za-z0-9._-]` and may be empty, which drops the
segment. Sensitive objects (Secrets, and the target's sensitive types) must land on a path that
no other sensitive object can render, so they are never bundled: either the template carries the
whole identity, or it is a `byType` entry (which fixes the type) with the scope and name. Their
file name always ends in `.sops.yaml` (`.sops` goes before the template's extension when it does
not say so itself), so the folder's `.sops.yaml` creation rules cover it and every reader of the
repository knows it is encrypted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CLUSTER_BUCKET",
    "NO_PLACEMENT",
    "UNLABELLED_BUCKET",
    "PlacedObject",
    "Placement",
    "PlacementError",
    "PlacementSource",
    "Template",
    "compile_placement",
    "compile_template",
]

CLUSTER_BUCKET = "_cluster"
UNLABELLED_BUCKET = "_unlabeled"
_MAX_FALLBACK = 63
_FALLBACK = re.compile(r"^[A-Za-z0-9._-]*$")
_VARIABLE = re.compile(r"\{([^{}]*)\}")
_SIMPLE = frozenset(
    {"group", "groupPath", "version", "apiVersion", "resource", "kind", "scope", "namespace", "name"}
    | {"sensitiveSuffix"}
)
_FALLBACK_TAKERS = ("namespace", "label")
_FULL_IDENTITY = frozenset({"groupPath", "version", "resource", "namespace", "name"})


class PlacementError(ValueError):
    """A template or policy that is refused; the message names the field and the fault."""


class PlacementSource(StrEnum):
    """Which step chose a new object's path (the `source` label of the placement metric)."""

    BY_TYPE = "by_type"
    DEFAULT = "default"
    KUSTOMIZE_ROOT = "kustomize_root"


@dataclass(frozen=True, slots=True)
class PlacedObject:
    """What a template can read of the object being placed."""

    group: str
    version: str
    resource: str
    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    sensitive: bool = False

    @property
    def type_key(self) -> str:
        version_resource = f"{self.version}/{self.resource}"
        return f"{self.group}/{version_resource}" if self.group else version_resource


@dataclass(frozen=True, slots=True)
class _Part:
    literal: str
    variable: str = ""
    argument: str = ""
    fallback: str | None = None


@dataclass(frozen=True, slots=True)
class Template:
    text: str
    parts: tuple[_Part, ...]

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(p.variable for p in self.parts if p.variable)

    def render(self, obj: PlacedObject) -> str:
        """The path, relative to the target folder; empty segments collapse."""
        rendered = "".join(part.literal + _value(part, obj) for part in self.parts)
        path = "/".join(segment for segment in rendered.split("/") if segment)
        _check_segments(path, self.text)
        return path


def _value(part: _Part, obj: PlacedObject) -> str:
    variable = part.variable
    if not variable:
        return ""
    if variable == "label":
        value = obj.labels.get(part.argument, "")
        return value or (UNLABELLED_BUCKET if part.fallback is None else part.fallback)
    if variable == "namespace":
        return obj.namespace or (CLUSTER_BUCKET if part.fallback is None else part.fallback)
    values = {
        "group": obj.group,
        "groupPath": obj.group,
        "version": obj.version,
        "apiVersion": f"{obj.group}/{obj.version}" if obj.group else obj.version,
        "resource": obj.resource,
        "kind": obj.kind,
        "scope": "namespaced" if obj.namespace else "cluster",
        "name": obj.name,
        "sensitiveSuffix": ".sops.yaml" if obj.sensitive else ".yaml",
    }
    return values[variable]


def _check_segments(path: str, text: str) -> None:
    for segment in path.split("/"):
        if segment in (".", "..") or "\x00" in segment or segment.startswith(".git"):
            raise PlacementError(f"placement template {text!r} renders the segment {segment!r}")


def compile_template(text: str, field: str) -> Template:
    """`text` parsed and checked; raises PlacementError naming `field`."""
    if not text or text.startswith("/") or "\\" in text:
        raise PlacementError(f"{field}: a template is a relative path, got {text!r}")
    parts: list[_Part] = []
    position = 0
    for match in _VARIABLE.finditer(text):
        literal = text[position : match.start()]
        parts.append(_parse_variable(literal, match.group(1), field))
        position = match.end()
    tail = text[position:]
    if "{" in tail or "}" in tail or any("{" in p.literal or "}" in p.literal for p in parts):
        raise PlacementError(f"{field}: unbalanced braces in {text!r}")
    parts.append(_Part(tail))
    if any(segment in (".", "..") for segment in text.split("/")):
        raise PlacementError(f"{field}: {text!r} leaves the target folder")
    if any(segment.startswith(".git") for segment in text.split("/")):
        raise PlacementError(f"{field}: {text!r} writes into Git's own files")
    if not text.endswith((".yaml", ".yml", "{sensitiveSuffix}")):
        raise PlacementError(f"{field}: {text!r} must name its extension (.yaml or .yml)")
    return Template(text, tuple(parts))


def _parse_variable(literal: str, body: str, field: str) -> _Part:
    name, bar, fallback = body.partition("|")
    variable, colon, argument = name.partition(":")
    if variable == "label":
        if not colon or not argument:
            raise PlacementError(f"{field}: {{label:key}} needs a label key")
    elif colon or variable not in _SIMPLE:
        raise PlacementError(f"{field}: unknown variable {{{body}}}")
    if bar:
        if variable not in _FALLBACK_TAKERS:
            raise PlacementError(
                f"{field}: only {{namespace}} and {{label:key}} take a |fallback, not {{{name}}}"
            )
        if len(fallback) > _MAX_FALLBACK or not _FALLBACK.match(fallback) or fallback in (".", ".."):
            raise PlacementError(f"{field}: the fallback {fallback!r} must be up to 63 of [A-Za-z0-9._-]")
    return _Part(literal, variable, argument, fallback if bar else None)


def _identity_complete(template: Template, *, fixed_type: bool, namespaced: bool | None) -> bool:
    if template.variables >= _FULL_IDENTITY:
        return True
    if not fixed_type:
        return False
    needed = {"name"} | ({"namespace"} if namespaced is not False else set())
    return needed <= template.variables


@dataclass(frozen=True, slots=True)
class Placement:
    """A target's compiled placement policy."""

    by_type: Mapping[str, Template]
    default: Template | None

    def applies(self, obj: PlacedObject) -> bool:
        """Whether a template places `obj` (its type has a `byType` entry, or there is a `default`)."""
        return self.default is not None or obj.type_key in self.by_type

    def choose(self, obj: PlacedObject) -> tuple[str, PlacementSource] | None:
        """The path relative to the target folder and the step that chose it, or None when
        neither `byType` nor `default` applies. Raises PlacementError for a sensitive object that
        the template could bundle with another."""
        template = self.by_type.get(obj.type_key)
        if template is not None:
            return self._checked(template, obj, fixed_type=True), PlacementSource.BY_TYPE
        if self.default is not None:
            return self._checked(self.default, obj, fixed_type=False), PlacementSource.DEFAULT
        return None

    def check_sensitive(self, types: Iterable[tuple[str, str]], fields: tuple[str, str]) -> None:
        """Raises PlacementError naming the field of a template that could put two objects of one
        of `types` (the target's sensitive `(group, resource)` pairs) in one file: a `byType`
        entry for such a type without `{namespace}` and `{name}`, or a bundling `default` that
        such a type without an entry of its own would fall into. `compile_placement` checks
        Secrets; the other sensitive types are the target's encryption settings, known only
        beside them, and checking here names the field before anything runs rather than when the
        first such object is placed."""
        by_type_field, default_field = fields
        sensitive = {(group, resource.lower()) for group, resource in types}
        routed: set[tuple[str, str]] = set()
        for key, template in self.by_type.items():
            parts = key.split("/")
            kind = (parts[0] if len(parts) == 3 else "", parts[-1].lower())
            routed.add(kind)
            if kind in sensitive and not _identity_complete(template, fixed_type=True, namespaced=None):
                raise PlacementError(
                    f"{by_type_field}[{key}]: {kind[1]} is a sensitive type; its path needs "
                    "{namespace} and {name}, so two never share a file"
                )
        if self.default is None or self.default.variables >= _FULL_IDENTITY:
            return
        for group, resource in sorted(sensitive - routed):
            name = f"{group}/{resource}" if group else resource
            raise PlacementError(
                f"{default_field}: {self.default.text!r} bundles objects, so the sensitive type {name} "
                f"could fall into a shared file; add a {by_type_field} entry for it"
            )

    def _checked(self, template: Template, obj: PlacedObject, *, fixed_type: bool) -> str:
        namespaced = bool(obj.namespace)
        if obj.sensitive and not _identity_complete(template, fixed_type=fixed_type, namespaced=namespaced):
            raise PlacementError(
                f"placement {template.text!r} could put two {obj.kind} objects in one file; sensitive "
                "objects need {namespace} and {name} in a byType entry, or the full identity"
            )
        path = template.render(obj)
        return _sealed_name(path) if obj.sensitive else path


def _sealed_name(path: str) -> str:
    """`path` with `.sops` before its extension, unless it has it (`{sensitiveSuffix}`)."""
    if path.endswith((".sops.yaml", ".sops.yml")):
        return path
    stem, _, extension = path.rpartition(".")
    return f"{stem}.sops.{extension}"


def compile_placement(
    by_type: Mapping[str, str],
    default: str | None,
    *,
    fields: tuple[str, str] = ("spec.placement.byType", "spec.placement.default"),
) -> Placement:
    """A placement policy, checked as gitops-reverser checks it before any write. `fields` are the
    names the errors give the two settings (a GitTarget's by default; the configuration file's
    spelling there)."""
    by_type_field, default_field = fields
    compiled: dict[str, Template] = {}
    for key, text in by_type.items():
        parts = key.split("/")
        if len(parts) not in (2, 3) or not all(parts[-2:]):
            raise PlacementError(
                f"{by_type_field}: {key!r} is not group/version/resource or version/resource"
            )
        compiled[key] = compile_template(text, f"{by_type_field}[{key}]")
    template = compile_template(default, default_field) if default else None
    secrets = compiled.get("v1/secrets")
    if secrets is not None and not _identity_complete(secrets, fixed_type=True, namespaced=True):
        raise PlacementError(
            f"{by_type_field}[v1/secrets]: Secrets need {{namespace}} and {{name}} in their path, "
            "so two never share a file"
        )
    if template is not None and secrets is None and not template.variables >= _FULL_IDENTITY:
        raise PlacementError(
            f"{default_field}: {default!r} bundles objects, so a Secret could fall into a shared "
            f"file; add a {by_type_field} entry for v1/secrets"
        )
    return Placement(compiled, template)


NO_PLACEMENT = Placement({}, None)
"""A target without `placement`: no template applies."""
