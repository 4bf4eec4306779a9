"""`reverser resolve`: attribute recorded watch events offline from recorded audit events.

The tool to reach for when a commit names the wrong author: it runs the recording through exactly
the live path (accept gate and reduction of the webhook, a log, the follower, the index, the
resolver with its grace) and prints one JSON line per watch event with the tier and author, plus,
with `--explain-audit`, one line per audit event saying what the ingress did with it.

The facts go to a throwaway log: the embedded one in a temporary directory by default, or, when
the configuration names Kafka, topics under a fresh `<prefix>-resolve-<random>` prefix, so the
live fact topic is never touched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from pipeline.attribution.follower import FactFollower
from pipeline.attribution.index import FactIndex
from pipeline.attribution.kinds import group_resource_for
from pipeline.attribution.model import MATCHED_ON, Matched, Tier
from pipeline.attribution.resolver import Resolver, query_from_watch_object
from pipeline.commandline import settings_from_args
from pipeline.config import AttributionSettings, LogBackend, Settings
from pipeline.exitcodes import ExitCode, usage_error
from pipeline.facts.admission import InvalidReview, Review, parse_review, reduce_review
from pipeline.facts.records import build_records
from pipeline.facts.reduce import EventReason, Reduction, group_facts, reduce_event
from pipeline.log import Log, LogUnavailableError, open_log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import stream_name

__all__ = [
    "AuditDocument",
    "InputError",
    "publish_admission_reviews",
    "publish_audit_documents",
    "read_admission_file",
    "read_audit_file",
    "read_watch_file",
    "register",
    "resolve_watch_event",
]

READY_TIMEOUT_S = 120.0


class InputError(Exception):
    """A file that cannot be read or parsed; the message names the file and the document."""


class AuditDocument(NamedTuple):
    """The events of one document (a single Event or an EventList): one webhook request."""

    source: str
    events: list[Any]


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _json_lines(text: str) -> list[Any] | None:
    """The documents of a JSON-lines file (the apiserver's audit log format), or None if it is not one."""
    documents = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            documents.append(json.loads(line))
        except ValueError:
            return None
    return documents


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    """Non-empty documents of a YAML / JSON / multi-document / JSON-lines file, numbered from 1."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from exc
    documents: list[Any] = []
    try:
        documents.extend(yaml.load_all(text, Loader=_YAML_LOADER))
    except yaml.YAMLError as exc:
        lines = _json_lines(text)
        if lines is None or len(lines) < 2:
            raise InputError(f"{path}: document {len(documents) + 1}: not valid YAML or JSON: {exc}") from exc
        documents = lines
    for number, document in enumerate(documents, start=1):
        if document is not None:
            yield number, document


_IDENTITY_FIELDS = ("name", "namespace", "uid", "resourceVersion", "generateName")


def _stringify(mapping: object, fields: tuple[str, ...] = _IDENTITY_FIELDS) -> None:
    """YAML reads unquoted digits as numbers; identity fields are always strings on the wire."""
    if isinstance(mapping, dict):
        for field in fields:
            value = mapping.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                mapping[field] = str(value)


def _normalise_audit_event(event: object) -> object:
    """Make a YAML-read audit event look like the JSON the webhook receives (identity strings)."""
    if isinstance(event, dict):
        _stringify(event.get("objectRef"))
        for body_key in ("requestObject", "responseObject"):
            body = event.get(body_key)
            if isinstance(body, dict):
                _stringify(body.get("metadata"))
                items = body.get("items")
                if isinstance(items, list):
                    for item in items:
                        if isinstance(item, dict):
                            _stringify(item.get("metadata"))
    return event


def read_audit_file(path: Path) -> list[AuditDocument]:
    """Audit Events, EventLists, or a multi-document stream of them, in file order.

    Identity fields written as bare YAML numbers (`resourceVersion: 1001`) are read as the strings
    the apiserver would have sent.
    """
    documents: list[AuditDocument] = []
    for number, document in _documents(path):
        source = f"{path}#{number}"
        if isinstance(document, dict) and (document.get("kind") == "EventList" or "items" in document):
            items = document.get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise InputError(f"{path}: document {number}: EventList items must be a list")
            documents.append(AuditDocument(source, [_normalise_audit_event(e) for e in items]))
        elif isinstance(document, dict):
            documents.append(AuditDocument(source, [_normalise_audit_event(document)]))
        elif isinstance(document, list):
            documents.append(AuditDocument(source, [_normalise_audit_event(e) for e in document]))
        else:
            raise InputError(f"{path}: document {number}: expected an audit Event or EventList")
    return documents


def read_admission_file(path: Path) -> list[Review]:
    """AdmissionReview requests (as the apiserver posts them to the admission webhook), in file order.

    A document may also be a list of reviews. The message of a bad one names the file, the document
    and the field, as the webhook's 400 answer would.
    """
    reviews: list[Review] = []
    for number, document in _documents(path):
        for item in document if isinstance(document, list) else [document]:
            if isinstance(item, dict):
                request = item.get("request")
                if isinstance(request, dict):
                    for body_key in ("object", "oldObject"):
                        body = request.get(body_key)
                        if isinstance(body, dict):
                            _stringify(body.get("metadata"))
            try:
                reviews.append(parse_review(item))
            except InvalidReview as exc:
                raise InputError(f"{path}: document {number}: {exc}") from None
    return reviews


def read_watch_file(path: Path) -> list[dict[str, Any]]:
    """Watch events `{type, object}`, one per document or a list per document."""
    events: list[dict[str, Any]] = []
    for number, document in _documents(path):
        for event in document if isinstance(document, list) else [document]:
            if (
                not isinstance(event, dict)
                or not isinstance(event.get("type"), str)
                or not isinstance(event.get("object"), dict)
            ):
                raise InputError(f"{path}: document {number}: expected a watch event {{type, object}}")
            _stringify(event["object"].get("metadata"))
            events.append(event)
    return events


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "resolve",
        description=(
            "Run audit recordings through the webhook's accept gate and reduction into a throwaway "
            "log, rebuild a fact index from it, then resolve each recorded watch event and print one "
            "JSON line per event with the tier and author."
        ),
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML configuration file: Kafka connection, attribution limits (default: none)",
    )
    parser.add_argument(
        "--audit",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="audit Event / EventList file, YAML or JSON (repeatable, applied in order)",
    )
    parser.add_argument(
        "--admission",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="AdmissionReview file, YAML or JSON (repeatable, applied after --audit)",
    )
    parser.add_argument(
        "--watch",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="watch event file {type, object}, YAML or JSON (repeatable, resolved in order)",
    )
    parser.add_argument("--route", default="default", help="audit route the facts are filed under")
    grace_ms = AttributionSettings().grace_ms  # `attribution.grace_ms`'s default (pipeline.config)
    parser.add_argument(
        "--grace-ms",
        type=int,
        default=grace_ms,
        metavar="N",
        help=f"how long each watch event waits for a better fact (default {grace_ms})",
    )
    parser.add_argument(
        "--explain-audit",
        action="store_true",
        help="first print one line per audit event and admission review: published or dropped, and why",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.grace_ms < 0:
        raise usage_error("--grace-ms must be >= 0")
    try:
        audits = [doc for path in args.audit for doc in read_audit_file(path)]
        reviews = [review for path in args.admission for review in read_admission_file(path)]
        watches = [event for path in args.watch for event in read_watch_file(path)]
    except InputError as exc:
        raise usage_error(str(exc)) from None
    settings = settings_from_args(args)
    with tempfile.TemporaryDirectory(prefix="reverser-resolve-") as workdir:
        log_settings = settings.log
        if log_settings.effective_backend == LogBackend.KAFKA:
            prefix = f"{log_settings.topic_prefix}-resolve-{uuid.uuid4().hex[:10]}"
            log_settings = log_settings.model_copy(update={"topic_prefix": prefix})
        settings = settings.model_copy(update={"workdir": Path(workdir), "log": log_settings})
        return asyncio.run(_resolve(settings, args, _Inputs(audits, reviews, watches)))


def _explain(route: str, event: Any, reduction: Reduction, too_large: bool) -> dict[str, Any]:
    item = event if isinstance(event, dict) else {}
    gr = reduction.group_resource
    published = reduction.fact is not None and not too_large
    return {
        "auditID": item.get("auditID", "") if isinstance(item.get("auditID"), str) else "",
        "verb": item.get("verb", "") if isinstance(item.get("verb"), str) else "",
        "decision": "published" if published else "dropped",
        "reason": EventReason.FACT_TOO_LARGE if too_large else reduction.reason,
        "stream": stream_name(route, gr) if gr is not None and gr.resource else "",
    }


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line, separators=(", ", ": ")) + "\n")


async def publish_audit_documents(
    log: Log, topic: str, route: str, documents: list[AuditDocument], settings: Settings
) -> list[dict[str, Any]]:
    """Append each document's facts like the webhook would (one request per document).

    Returns one explanation per audit event: published or dropped, the reason and the stream.
    """
    explained: list[dict[str, Any]] = []
    for document in documents:
        reductions = [
            reduce_event(event, uid_cap=settings.audit.collection_uid_cap) for event in document.events
        ]
        built = build_records(group_facts(route, reductions), settings.log.topics.max_message_bytes)
        if built.records:
            await log.append_many(topic, built.records)
        dropped = {id(fact) for fact in built.dropped}
        for event, reduction in zip(document.events, reductions, strict=True):
            too_large = reduction.fact is not None and id(reduction.fact) in dropped
            explained.append(_explain(route, event, reduction, too_large))
    return explained


async def publish_admission_reviews(
    log: Log, topic: str, route: str, reviews: list[Review], settings: Settings
) -> list[dict[str, Any]]:
    """Append each review's fact like the admission webhook would, one request per review.

    The reception time stands in for the stage time, as on the webhook. Returns one explanation
    per review: published or dropped, the reason and the stream.
    """
    explained: list[dict[str, Any]] = []
    for review in reviews:
        reduction = reduce_review(review, time.time_ns() // 1000)
        built = build_records(group_facts(route, [reduction]), settings.log.topics.max_message_bytes)
        if built.records:
            await log.append_many(topic, built.records)
        too_large = bool(built.dropped)
        gr = reduction.group_resource
        explained.append(
            {
                "admissionUID": review.uid,
                "operation": str(review.request.get("operation") or ""),
                "decision": "published" if reduction.fact is not None and not too_large else "dropped",
                "reason": EventReason.FACT_TOO_LARGE if too_large else reduction.reason,
                "stream": stream_name(route, gr) if gr is not None and gr.resource else "",
            }
        )
    return explained


class _Inputs(NamedTuple):
    """What the files gave: the fact sources in the order they are appended, then the watch events."""

    audits: list[AuditDocument]
    reviews: list[Review]
    watches: list[dict[str, Any]]


async def _resolve(settings: Settings, args: argparse.Namespace, inputs: _Inputs) -> int:
    route: str = args.route
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    async with open_log(settings) as log:
        await log.create_topics([s for s in topic_specs(settings) if s.name == topics.audit_facts])
        explained = await publish_audit_documents(log, topics.audit_facts, route, inputs.audits, settings)
        explained += await publish_admission_reviews(log, topics.audit_facts, route, inputs.reviews, settings)
        if args.explain_audit:
            for line in explained:
                _emit(line)
        index = FactIndex.from_settings(settings.attribution)
        follower = FactFollower(log, topics, index, settings, fetch_timeout_ms=100)
        await follower.start()
        try:
            await _wait_ready(follower)
            evicted = index.evictions["per_type"] + index.evictions["total"]
            if evicted:
                print(
                    f"reverser resolve: warning: {evicted} index entries were evicted by the caps, so some "
                    "facts are missing; raise attribution.max_facts_per_type / max_facts with --config",
                    file=sys.stderr,
                )
            resolver = Resolver(index, args.grace_ms)
            for event in inputs.watches:
                _emit(await resolve_watch_event(resolver, route, event))
        finally:
            await follower.stop()
    sys.stdout.flush()
    return ExitCode.OK


async def _wait_ready(follower: FactFollower) -> None:
    """The index caught up with the throwaway fact topic, or LogUnavailableError after the bound."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await follower.wait_ready()
    except TimeoutError:
        raise LogUnavailableError(f"the fact index did not catch up within {READY_TIMEOUT_S:g} s") from None


def _fact_evidence(fact: Matched) -> dict[str, Any]:
    """The matched fact as the line shows it: enough to find its audit or admission request."""
    return {
        "auditID": fact.audit_id,
        "verb": fact.verb,
        "namespace": fact.namespace,
        "name": fact.name,
        "uid": fact.uid,
        "resourceVersion": fact.resource_version,
        "stageMs": fact.stage_ms,
    }


async def resolve_watch_event(resolver: Resolver, route: str, event: dict[str, Any]) -> dict[str, Any]:
    """The output line for one watch event; BOOKMARK, ERROR and other types get tier `none`."""
    obj: dict[str, Any] = event["object"]
    event_type: str = event["type"]
    api_version = obj.get("apiVersion") if isinstance(obj.get("apiVersion"), str) else ""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else ""
    gr, version = group_resource_for(str(api_version), str(kind))
    query = query_from_watch_object(route, gr, event_type, obj, version)
    raw_metadata = obj.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    line: dict[str, Any] = {
        "type": event_type,
        "group": gr.group,
        "resource": gr.resource,
        "namespace": str(metadata.get("namespace") or ""),
        "name": str(metadata.get("name") or ""),
        "uid": str(metadata.get("uid") or ""),
        "resourceVersion": str(metadata.get("resourceVersion") or ""),
    }
    if query is None:
        line.update(tier=Tier.NONE, author="", actorKind="none", matchedOn=MATCHED_ON[Tier.NONE])
        return line
    found = await resolver.resolve(query)
    tier = Tier(found.tier)
    line.update(tier=tier, author=found.author, actorKind=found.actor_kind, matchedOn=MATCHED_ON[tier])
    if found.fact is not None:
        line["fact"] = _fact_evidence(found.fact)
    if found.tier == Tier.ADMISSION:
        # the key the admission fact and this event share: what an operator recomputes to check it
        line["contentKey"] = query.content_key
    if found.candidates:
        line["candidates"] = [
            {"author": c.author, "verb": c.verb, "auditID": c.audit_id} for c in found.candidates
        ]
    return line
