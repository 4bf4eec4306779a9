"""The values the index stores and answers with: tiers, queries, stored facts and attributions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from pipeline.attribution.selector import LabelSelector
from pipeline.facts.model import AuthorFact
from pipeline.models import GroupResource

__all__ = [
    "ABSENT",
    "CONFLICT",
    "DELETECOLLECTION_BODY_UID",
    "DELETECOLLECTION_SCOPE",
    "DELETE_STICKY",
    "EXACT",
    "LATEST",
    "NAME",
    "NONE",
    "RESOURCE_VERSION",
    "TIERS",
    "Attribution",
    "FactQuery",
    "FactRow",
    "StoredCollection",
    "StoredFact",
    "actor_kind",
    "avro_fact_row",
    "fact_row",
    "is_removal_verb",
]

DELETE_STICKY: Final = "delete_sticky"
EXACT: Final = "exact"
DELETECOLLECTION_BODY_UID: Final = "deletecollection_body_uid"
LATEST: Final = "latest"
NAME: Final = "name"
DELETECOLLECTION_SCOPE: Final = "deletecollection_scope"
RESOURCE_VERSION: Final = "resource_version"
ABSENT: Final = "absent"
# Two users' facts claim the same object version (or deletion): the event resolves to neither.
CONFLICT: Final = "conflict"
# Not a lookup result: what `reverser resolve` prints for BOOKMARK and ERROR events.
NONE: Final = "none"

TIERS: Final = (
    DELETE_STICKY,
    EXACT,
    DELETECOLLECTION_BODY_UID,
    LATEST,
    NAME,
    DELETECOLLECTION_SCOPE,
    RESOURCE_VERSION,
    CONFLICT,
    ABSENT,
)

SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"


def is_removal_verb(verb: str) -> bool:
    """`delete` and `deletecollection`, case-insensitively."""
    lowered = verb.lower()
    return lowered == "delete" or lowered == "deletecollection"


def actor_kind(author: str) -> str:
    """`none` for no author, `serviceaccount` for `system:serviceaccount:*`, else `user`."""
    if not author:
        return "none"
    return "serviceaccount" if author.startswith(SERVICE_ACCOUNT_PREFIX) else "user"


#: One fact as the index files it: the `fact_batch` AuthorFact fields in schema order (author,
#: displayName, email, verb, auditID, namespace, name, uid, resourceVersion, stageTimestampMicros,
#: labelSelector, uids). A plain tuple, so the follower can build one per fact straight from the
#: record bytes; the index reads only deletecollection facts' stage timestamp, labelSelector and uids.
FactRow = tuple[str, str, str, str, str, str, str, str, str, int, str | None, Sequence[str] | None]


def fact_row(fact: AuthorFact) -> FactRow:
    """An `AuthorFact` as the row the index files."""
    return (
        fact.author,
        fact.display_name,
        fact.email,
        fact.verb,
        fact.audit_id,
        fact.namespace,
        fact.name,
        fact.uid,
        fact.resource_version,
        fact.stage_timestamp_us,
        fact.label_selector,
        fact.uids,
    )


def avro_fact_row(fact: Mapping[str, Any]) -> FactRow:
    """A decoded `fact_batch` AuthorFact dict as the row the index files."""
    return (
        fact["author"],
        fact["displayName"],
        fact["email"],
        fact["verb"],
        fact["auditID"],
        fact["namespace"],
        fact["name"],
        fact["uid"],
        fact["resourceVersion"],
        fact["stageTimestampMicros"],
        fact["labelSelector"],
        fact["uids"],
    )


class Identity(NamedTuple):
    """Who a fact names (the index files it as a plain, interned `(author, displayName, email)`)."""

    author: str
    display_name: str
    email: str


class StoredFact(NamedTuple):
    """One filed fact (not a collection), as a lookup answers it. `at_ms` is its record's append time.

    The index itself files the same fields as a plain tuple (a NamedTuple is never untracked by
    the garbage collector) and builds this view per answer. `stage_ms` is the apiserver's
    `stageTimestamp` (0 if it sent none): when the change was made, in the apiserver's clock.
    """

    identity: Identity
    verb: str
    audit_id: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    at_ms: int
    stage_ms: int

    @property
    def author(self) -> str:
        return self.identity.author


class StoredCollection:
    """A filed `deletecollection` fact: namespace, parsed selector and the uid set its response listed.

    `live` turns False when eviction or the sweep removes it (its eviction-order reference is stale).

    `selector is None` with `invalid_selector False` means "match everything"; `uids is None` means
    the response listed no usable uid set (fall back to the scope tier).
    """

    __slots__ = ("at_ms", "audit_id", "identity", "invalid_selector", "label_selector", "live", "namespace",
                 "selector", "stage_ms", "uids", "verb")

    def __init__(
        self,
        identity: Identity,
        verb: str,
        audit_id: str,
        namespace: str,
        label_selector: str,
        selector: LabelSelector | None,
        invalid_selector: bool,
        uids: frozenset[str] | None,
        stage_ms: int,
        at_ms: int,
    ) -> None:
        self.identity = identity
        self.verb = verb
        self.audit_id = audit_id
        self.namespace = namespace
        self.label_selector = label_selector
        self.selector = selector
        self.invalid_selector = invalid_selector
        self.uids = uids
        self.stage_ms = stage_ms
        self.at_ms = at_ms
        self.live = True

    @property
    def author(self) -> str:
        return self.identity.author

    @property
    def name(self) -> str:
        return ""

    @property
    def uid(self) -> str:
        return ""

    @property
    def resource_version(self) -> str:
        return ""

    def __repr__(self) -> str:
        return (
            f"StoredCollection(author={self.identity.author!r}, ns={self.namespace!r}, "
            f"selector={self.label_selector!r}, uids={None if self.uids is None else len(self.uids)}, "
            f"at_ms={self.at_ms})"
        )


Matched = StoredFact | StoredCollection


class FactQuery(NamedTuple):
    """What the watch side knows about one event, as the join needs it (see docs/attribution.md).

    `exact_capable` is True for ADDED/MODIFIED without `deletionTimestamp`: the event's RV is the one
    its own write produced. Removals (False) may consult the sticky, latest and collection tiers.
    `event_ms` is when the change happened at the latest (the watch's observation time; 0 if
    unknown): a resolution is held until the route's audit watermark passes it.
    """

    route: str
    group_resource: GroupResource
    uid: str
    resource_version: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    exact_capable: bool
    version: str = ""
    event_ms: int = 0


class Attribution(NamedTuple):
    """The answer for one query: the tier that matched and the fact, or `absent` with no fact.

    A `conflict` has no fact (it names no one) and carries the competing facts as `candidates`.
    """

    tier: str
    fact: Matched | None
    candidates: tuple[StoredFact, ...] = ()

    @property
    def event_ms(self) -> int:
        """When the matched change was made (its audit stage time, ms); 0 if unknown or no fact."""
        return self.fact.stage_ms if self.fact is not None else 0

    @property
    def decided(self) -> bool:
        """A fact matched, or the slot is in conflict (no later fact can change that)."""
        return self.fact is not None or self.tier == CONFLICT

    @property
    def author(self) -> str:
        return self.fact.identity.author if self.fact is not None else ""

    @property
    def display_name(self) -> str:
        return self.fact.identity.display_name if self.fact is not None else ""

    @property
    def email(self) -> str:
        return self.fact.identity.email if self.fact is not None else ""

    @property
    def actor_kind(self) -> str:
        return actor_kind(self.author)

    @property
    def resolved(self) -> bool:
        return self.fact is not None and bool(self.fact.identity.author)


ABSENT_ATTRIBUTION: Final = Attribution(ABSENT, None)
