"""The effective configuration as a published version: a compiled configuration and its number.

Every replica and every stage runs the newest version on `<prefix>.config`; a restarted process
reads it back before it starts anything. The record's wire form is owned by
`pipeline.codec.config_state`; this module maps the compiled configuration (objects named by
`ObjectRef`, field errors as `FieldProblem`) to and from that record.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.codec import DecodeError
from pipeline.codec.config_state import (
    ConfigObject,
    ConfigStateRecord,
    ItemProblemEntry,
    ObjectName,
    RuleSource,
    decode_config_state,
    encode_config_state,
)
from pipeline.config import Settings
from pipeline.customresources.compile import (
    CompiledConfig,
    FieldProblem,
    ItemProblem,
    ObjectReport,
    RuleOrigin,
)
from pipeline.customresources.objects import Kind, ObjectRef
from pipeline.log.api import PendingRecord, Record

__all__ = ["ConfigState", "decode_state", "encode_state"]


@dataclass(frozen=True, slots=True)
class ConfigState:
    """One published version of the effective configuration."""

    version: int
    published_at_ms: int
    compiled: CompiledConfig

    def settings(self, base: Settings) -> Settings:
        """`base` (the file: log, clusters, ...) with this version's providers and targets."""
        return self.compiled.settings(base)

    def same_content(self, compiled: CompiledConfig) -> bool:
        """Whether `compiled` would publish nothing new (so no version is spent on it)."""
        return _record(0, 0, self.compiled).to_avro() == _record(0, 0, compiled).to_avro()


def _name(ref: ObjectRef) -> ObjectName:
    return ObjectName(ref.kind.value, ref.namespace, ref.name)


def _ref(name: ObjectName) -> ObjectRef:
    return ObjectRef(Kind(name.kind), name.namespace, name.name)


def _record(version: int, published_at_ms: int, compiled: CompiledConfig) -> ConfigStateRecord:
    return ConfigStateRecord(
        version=version,
        published_at_ms=published_at_ms,
        providers=tuple(compiled.providers),
        targets=tuple(compiled.targets),
        objects=tuple(
            ConfigObject(
                _name(ref),
                report.generation,
                tuple((e.path, e.message) for e in report.errors),
                tuple(report.unsupported),
            )
            for ref, report in sorted(compiled.reports.items())
        ),
        rules=tuple(
            RuleSource(target, index, _name(origin.ref), origin.item)
            for target, origins in sorted(compiled.origins.items())
            for index, origin in enumerate(origins)
        ),
        item_problems=tuple(
            ItemProblemEntry(_name(p.ref), p.item, p.resource, p.reason, p.message)
            for p in compiled.item_problems
        ),
    )


def encode_state(state: ConfigState) -> PendingRecord:
    return encode_config_state(_record(state.version, state.published_at_ms, state.compiled))


def decode_state(record: Record) -> ConfigState:
    """Raises DecodeError for a record that is not a config state (an unknown kind included)."""
    data = decode_config_state(record)
    reports: dict[ObjectRef, ObjectReport] = {}
    try:
        for item in data.objects:
            ref = _ref(item.object)
            errors = [FieldProblem(path, message) for path, message in item.errors]
            reports[ref] = ObjectReport(ref, item.generation, errors, list(item.unsupported))
        origins: dict[str, list[RuleOrigin]] = {}
        for rule in data.rules:
            origins.setdefault(rule.target, []).append(RuleOrigin(_ref(rule.object), rule.item))
        problems = [
            ItemProblem(_ref(p.object), p.item, p.resource, p.reason, p.message) for p in data.item_problems
        ]
    except ValueError as exc:  # a kind this version does not know
        raise DecodeError(f"config_state at offset {record.offset}: {exc}") from exc
    compiled = CompiledConfig(
        providers=list(data.providers),
        targets=list(data.targets),
        reports=reports,
        origins=origins,
        item_problems=problems,
    )
    return ConfigState(data.version, data.published_at_ms, compiled)
