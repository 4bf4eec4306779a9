"""The effective configuration as a published version: a compiled configuration and its number.

Every replica and every stage runs the newest version on `<prefix>.config`; a restarted process
reads it back before it starts anything. The record's wire form is owned by
`pipeline.codec.config_state`; this module maps the compiled configuration (objects named by
`ObjectRef`, field errors as `FieldProblem`) to and from that record, and makes sure the record
fits the topic (`publishable`): one record over `max.message.bytes` would stop every version after
it, for every team, so the objects that make it too large are left out with that reason instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
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
    settings_json,
)
from pipeline.config import Settings
from pipeline.customresources.compile import (
    OFFLINE,
    ClusterReads,
    CompiledConfig,
    FieldProblem,
    ItemProblem,
    ObjectReport,
    RuleOrigin,
    compile_resources,
)
from pipeline.customresources.objects import CustomResource, Kind, ObjectRef, effective_name
from pipeline.customresources.tenancy import CompileLimits
from pipeline.log.api import RECORD_OVERHEAD_BYTES, PendingRecord, Record

__all__ = ["ConfigState", "decode_state", "encode_state", "publishable", "record_bytes"]

# The largest version number and publication time a record can carry (Avro longs, zig-zag varints
# of at most 10 bytes): sizes are measured with them, so a record that fits keeps fitting.
_LARGEST_LONG = 2**63 - 1


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
        clusters=tuple(compiled.clusters),
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
        clusters=list(data.clusters),
    )
    return ConfigState(data.version, data.published_at_ms, compiled)


def record_bytes(compiled: CompiledConfig) -> int:
    """What the record of `compiled` counts against the config topic's `max.message.bytes`."""
    record = encode_config_state(_record(_LARGEST_LONG, _LARGEST_LONG, compiled))
    return record.size_bytes + RECORD_OVERHEAD_BYTES


def _contributions(compiled: CompiledConfig, home_namespace: str) -> dict[ObjectRef, int]:
    """About how many bytes of the record each object accounts for: its provider or target (rules
    apart), the rules that came from it, and its report."""
    named = {
        (ref.kind, effective_name(ref.namespace, ref.name, home_namespace)): ref
        for ref in compiled.reports
        if ref.kind in (Kind.GIT_PROVIDER, Kind.GIT_TARGET)
    }
    sizes = {
        ref: len(json.dumps([[e.path, e.message] for e in report.errors], ensure_ascii=False))
        + len(json.dumps(report.unsupported, ensure_ascii=False))
        for ref, report in compiled.reports.items()
    }
    for provider in compiled.providers:
        ref = named[(Kind.GIT_PROVIDER, provider.name)]
        sizes[ref] += len(settings_json(provider))
    for target in compiled.targets:
        ref = named[(Kind.GIT_TARGET, target.name)]
        sizes[ref] += len(settings_json(target.model_copy(update={"rules": []})))
        for origin, rule in zip(compiled.origins.get(target.name, []), target.rules, strict=True):
            sizes[origin.ref] += len(settings_json(rule))
    return sizes


def publishable(
    objects: Iterable[CustomResource],
    *,
    home_namespace: str,
    base: Settings,
    limits: CompileLimits | None = None,
    reads: ClusterReads = OFFLINE,
) -> CompiledConfig:
    """`compile_resources` of `objects`, with a record that fits the config topic.

    While the record is too large, the objects accounting for the most of it are left out, tenant
    objects (outside `home_namespace`) before the platform's, each with an error saying so; the
    rest is published. Per-object and per-namespace caps make this rare: it takes many tenants
    near their caps at once.
    """
    resources = list(objects)
    limit = base.log.topics.max_message_bytes
    excluded: dict[ObjectRef, str] = {}
    while True:
        compiled = compile_resources(
            resources,
            home_namespace=home_namespace,
            base=base,
            limits=limits,
            excluded=excluded,
            reads=reads,
        )
        size = record_bytes(compiled)
        if size <= limit:
            return compiled
        candidates = sorted(
            ((ref, n) for ref, n in _contributions(compiled, home_namespace).items() if ref not in excluded),
            key=lambda pair: (pair[0].namespace in (home_namespace, ""), -pair[1], pair[0]),
        )
        if not candidates:
            return compiled
        freed = 0
        for ref, contributed in candidates:
            excluded[ref] = (
                f"left out: with it the configuration record would be {size} bytes, over the config "
                f"topic's limit of {limit} bytes (log.topics.max_message_bytes); it adds about "
                f"{contributed} bytes"
            )
            freed += contributed
            if freed >= size - limit:
                break
