"""The accept gate and the audit-event → author-fact reduction (docs/audit-ingress.md, "What becomes a fact").

Shared by the audit webhook ingress and `reverser resolve`, so that offline attribution of a
recording gives exactly the facts the live ingress would have published. Pure and lenient: any
JSON value is accepted as an event, and a malformed nested field reads as absent; nothing here
raises on input data.

Decision on `Status.details.uid`: a delete answered with a `Status` body does **not** read
`Status.details.uid`. Upstream does not read it either, and reading it would silently move corpus
row 10 (owner-reference cascade) from the `name` tier to `delete_sticky`. Parity wins here because
the watch side's tiering was specified against that behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Final, NamedTuple
from urllib.parse import unquote_plus

from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.config import AuditSettings
from pipeline.facts.timeutil import parse_rfc3339_us
from pipeline.models import GroupResource
from pipeline.operation import Operation

__all__ = [
    "DEFAULT_UID_CAP",
    "DROP_REASONS",
    "UIDSET_NO_UIDS",
    "UIDSET_UID_CAP",
    "Category",
    "EventReason",
    "Reduction",
    "category",
    "group_facts",
    "reduce_event",
    "user_extra",
]


class EventReason(StrEnum):
    """What became of one audit event (the `reason` label of `reverser_audit_events_total`)."""

    QUEUED = "queued"
    WRITE_ERROR = "write_error"
    NO_ATTRIBUTION_FACT = "no_attribution_fact"
    NON_SCALE_SUBRESOURCE = "non_scale_subresource"
    NIL_EVENT = "nil_event"
    STAGE = "stage"
    READ_ONLY_OR_UNKNOWN_VERB = "read_only_or_unknown_verb"
    FAILED_REQUEST = "failed_request"
    DRY_RUN = "dry_run"
    UNCHANGED_RESOURCE_VERSION = "unchanged_resource_version"
    # Not in upstream (its decoder rejects the whole list): an item that is not a JSON object, whose
    # response code is not a number, or whose objectRef group or resource is not text (a lone
    # UTF-16 surrogate, which no record key can hold). Counted and skipped so the rest still lands.
    MALFORMED_EVENT = "malformed_event"
    # A fact the log cannot hold even alone (see pipeline.facts.records); counted, not published.
    FACT_TOO_LARGE = "fact_too_large"
    # A fact for a group/resource that no target of the route's cluster watches: it could never be
    # joined, and accepting it would let any poster fill the fact index (see docs/security.md).
    UNWATCHED_TYPE = "unwatched_type"
    # Admission only: an update that leaves the mirrored content as it was (pipeline.facts.admission).
    UNCHANGED_CONTENT = "unchanged_content"


class Category(StrEnum):
    """The coarse `category` label of `reverser_audit_events_total`."""

    STORED = "stored"
    SKIPPED = "skipped"
    DROPPED = "dropped"
    ERROR = "error"


DROP_REASONS = frozenset(
    {
        EventReason.NON_SCALE_SUBRESOURCE,
        EventReason.NIL_EVENT,
        EventReason.STAGE,
        EventReason.READ_ONLY_OR_UNKNOWN_VERB,
        EventReason.FAILED_REQUEST,
        EventReason.DRY_RUN,
        EventReason.UNCHANGED_RESOURCE_VERSION,
        EventReason.MALFORMED_EVENT,
        EventReason.UNWATCHED_TYPE,
        EventReason.UNCHANGED_CONTENT,
    }
)

UIDSET_UID_CAP = "uid_cap"
UIDSET_NO_UIDS = "no_uids"
#: `audit.collection_uid_cap`'s default (pipeline.config owns it), for a caller without settings.
DEFAULT_UID_CAP: Final = AuditSettings().collection_uid_cap

DISPLAY_NAME_EXTRA = "configbutler.ai/claims/display-name"
EMAIL_EXTRA = "configbutler.ai/claims/email"

# Lower-cased verb -> operation; anything else (get, list, watch, proxy, ...) is not a mutation.
_MUTATIONS: Final[dict[str, Operation]] = {
    "create": Operation.CREATE,
    "update": Operation.UPDATE,
    "patch": Operation.UPDATE,
    "delete": Operation.DELETE,
    "deletecollection": Operation.DELETE,
}

_CATEGORIES: dict[str, Category] = {
    EventReason.QUEUED: Category.STORED,
    EventReason.WRITE_ERROR: Category.ERROR,
    EventReason.NO_ATTRIBUTION_FACT: Category.SKIPPED,
}

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def category(reason: str) -> Category:
    """The coarse `category` label for an outcome reason: stored, skipped, dropped or error."""
    found = _CATEGORIES.get(reason)
    if found is not None:
        return found
    return Category.DROPPED if reason in DROP_REASONS else Category.ERROR


class Reduction(NamedTuple):
    """What one audit event turned into.

    `reason` is `queued` when `fact` is set (the ingress turns it into `write_error` if publishing
    fails), `no_attribution_fact` for an accepted event without a fact, or a drop reason.
    `group_resource` is the stream type from `objectRef` (None without a usable objectRef).
    `uidset_reason` is `uid_cap` / `no_uids` when a collection delete's list body could not give a
    uid set and that must be counted; None otherwise.
    """

    reason: str
    group_resource: GroupResource | None
    fact: AuthorFact | None
    uidset_reason: str | None = None


def _text(mapping: dict[str, Any], key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


def _is_utf8(text: str) -> bool:
    """False for a string holding a lone UTF-16 surrogate (JSON can escape one; UTF-8 cannot)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _metadata(body: object) -> dict[str, Any] | None:
    if isinstance(body, dict):
        metadata = body.get("metadata")
        if isinstance(metadata, dict):
            return metadata
    return None


def _query_values(uri: str, name: str) -> list[str] | None:
    """Values of query parameter `name` in a request URI; None if the URI does not parse.

    Mirrors Go's `url.ParseRequestURI` + `Query()`: an absolute path or absolute URI, no control
    characters, valid escapes in the path; malformed query pairs are skipped, not fatal.
    """
    if _CONTROL.search(uri) is not None:
        return None
    if not uri.startswith("/") and _SCHEME.match(uri) is None:
        return None
    path, sep, query = uri.partition("?")
    if _BAD_ESCAPE.search(path) is not None:
        return None
    if not sep or not query:
        return []
    values: list[str] = []
    for pair in query.split("&"):
        if not pair or ";" in pair:
            continue
        raw_key, _, raw_value = pair.partition("=")
        if _BAD_ESCAPE.search(pair) is not None:
            continue
        if unquote_plus(raw_key) == name:
            values.append(unquote_plus(raw_value))
    return values


def _is_dry_run(uri: object) -> bool:
    if not isinstance(uri, str) or "?" not in uri:
        return False
    query = uri.partition("?")[2]
    if "dryRun" not in query and "%" not in query:
        return False
    values = _query_values(uri, "dryRun")
    return values is not None and "All" in values


def _label_selector(uri: object) -> str:
    if not isinstance(uri, str):
        return ""
    values = _query_values(uri, "labelSelector")
    return values[0] if values else ""


def user_extra(extra: object, key: str) -> str:
    """The first value of `user.extra[key]` (how identity providers pass a display name or email)."""
    if not isinstance(extra, dict):
        return ""
    values = extra.get(key)
    if isinstance(values, list) and values and isinstance(values[0], str):
        return values[0]
    return ""


def _uid_set(body: object, uid_cap: int) -> tuple[list[str] | None, str | None]:
    """The uids a collection delete's response listed, and the metric reason when there are none."""
    if not isinstance(body, dict):
        return None, None
    items = body.get("items")
    if not isinstance(items, list) or not items:
        return None, None
    if len(items) > uid_cap:
        return None, UIDSET_UID_CAP
    uids: list[str] = []
    for item in items:
        metadata = _metadata(item)
        if metadata is not None:
            uid = metadata.get("uid")
            if isinstance(uid, str) and uid:
                uids.append(uid)
    if not uids:
        return None, UIDSET_NO_UIDS
    return uids, None


def reduce_event(event: object, *, uid_cap: int = DEFAULT_UID_CAP) -> Reduction:
    """Run one decoded audit event through the accept gate and reduce it to at most one fact.

    `uid_cap` bounds a collection delete's uid set by item count (<= 0 means the default 10,000).
    This is the ingress hot path (hundreds of events per request), hence the inlined lookups.
    """
    if event is None:
        return Reduction(EventReason.NIL_EVENT, None, None)
    if not isinstance(event, dict):
        return Reduction(EventReason.MALFORMED_EVENT, None, None)
    object_ref = event.get("objectRef")
    gr: GroupResource | None = None
    resource = ""
    if isinstance(object_ref, dict):
        resource = object_ref.get("resource", "")
        if not isinstance(resource, str):
            resource = ""
        group = object_ref.get("apiGroup", "")
        if not isinstance(group, str):
            group = ""
        if not (_is_utf8(resource) and _is_utf8(group)):
            return Reduction(EventReason.MALFORMED_EVENT, None, None)
        gr = GroupResource(group, resource)
    else:
        object_ref = None
    verb = event.get("verb", "")
    if not isinstance(verb, str):
        verb = ""
    verb_lower = verb.lower()
    operation = _MUTATIONS.get(verb_lower)

    # The accept gate, in the specified order.
    if object_ref is not None:
        subresource = object_ref.get("subresource")
        if subresource and (operation is None or subresource != "scale"):
            return Reduction(EventReason.NON_SCALE_SUBRESOURCE, gr, None)
    if event.get("stage") != "ResponseComplete":
        return Reduction(EventReason.STAGE, gr, None)
    if operation is None:
        return Reduction(EventReason.READ_ONLY_OR_UNKNOWN_VERB, gr, None)
    status = event.get("responseStatus")
    if isinstance(status, dict):
        code = status.get("code")
        if code is not None:
            if isinstance(code, bool) or not isinstance(code, int | float):
                return Reduction(EventReason.MALFORMED_EVENT, gr, None)
            if code >= 300:
                return Reduction(EventReason.FAILED_REQUEST, gr, None)
    request_uri = event.get("requestURI")
    if _is_dry_run(request_uri):
        return Reduction(EventReason.DRY_RUN, gr, None)
    request_body = event.get("requestObject")
    response_body = event.get("responseObject")
    response_md = _metadata(response_body)
    request_md = _metadata(request_body)
    response_rv = ""
    if response_md is not None:
        response_rv = response_md.get("resourceVersion", "")
        if not isinstance(response_rv, str):
            response_rv = ""
        if response_rv and request_md is not None and request_md.get("resourceVersion") == response_rv:
            return Reduction(EventReason.UNCHANGED_RESOURCE_VERSION, gr, None)

    # The fact.
    if object_ref is None or not resource or gr is None:
        return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)
    user = event.get("impersonatedUser")
    if not isinstance(user, dict) or not _text(user, "username"):
        user = event.get("user")
        if not isinstance(user, dict):
            return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)
    author = _text(user, "username")
    if not author:
        return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)

    namespace = _text(object_ref, "namespace")
    name = _text(object_ref, "name")
    uid = _text(object_ref, "uid")
    if not (namespace and name and uid):
        order = (request_md, response_md) if operation is Operation.DELETE else (response_md, request_md)
        for metadata in order:
            if metadata is not None:
                namespace = namespace or _text(metadata, "namespace")
                name = name or _text(metadata, "name")
                uid = uid or _text(metadata, "uid")

    is_collection = verb_lower == "deletecollection"
    if not name and not is_collection:
        return Reduction(EventReason.NO_ATTRIBUTION_FACT, gr, None)
    resource_version = response_rv or _text(object_ref, "resourceVersion")
    audit_id = event.get("auditID", "")
    extra = user.get("extra")
    fact = AuthorFact(
        author,
        user_extra(extra, DISPLAY_NAME_EXTRA) if extra else "",
        user_extra(extra, EMAIL_EXTRA) if extra else "",
        verb,
        audit_id if isinstance(audit_id, str) else "",
        namespace,
        name,
        uid,
        resource_version,
        parse_rfc3339_us(event.get("stageTimestamp")),
    )
    if not is_collection:
        return Reduction(EventReason.QUEUED, gr, fact)
    fact.name = fact.uid = fact.resource_version = ""
    fact.label_selector = _label_selector(request_uri)
    fact.uids, uidset_reason = _uid_set(response_body, uid_cap if uid_cap > 0 else DEFAULT_UID_CAP)
    return Reduction(EventReason.QUEUED, gr, fact, uidset_reason)


def group_facts(route: str, reductions: Iterable[Reduction]) -> list[FactBatch]:
    """One batch per group/resource in first-appearance order, facts in event order."""
    batches: dict[GroupResource, FactBatch] = {}
    for reduction in reductions:
        fact = reduction.fact
        gr = reduction.group_resource
        if fact is None or gr is None:
            continue
        batch = batches.get(gr)
        if batch is None:
            batches[gr] = FactBatch(route, gr, [fact])
        else:
            batch.facts.append(fact)
    return list(batches.values())
