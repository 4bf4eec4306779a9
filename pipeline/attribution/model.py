"""The values the index stores and answers with: tiers, queries, stored facts and attributions."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final, NamedTuple

from pipeline.codec.branch_work import ActorKind
from pipeline.kube.selector import LabelSelector
from pipeline.models import GroupResource

__all__ = [
    "MATCHED_ON",
    "TIERS",
    "Attribution",
    "FactQuery",
    "StoredCollection",
    "StoredFact",
    "Tier",
    "actor_kind",
    "is_removal_verb",
]


class Tier(StrEnum):
    """How an attribution was found, strongest first (docs/attribution.md); the values are on the
    wire (branch-work `tier`) and in metric labels."""

    DELETE_STICKY = "delete_sticky"
    EXACT = "exact"
    # An admission fact of the same uid whose content key is the event's (pipeline.content.key).
    ADMISSION = "admission"
    # An admission fact of a scale of the event's uid, made from the event's predecessor version
    # with the event's replica count (pipeline.content.scale).
    SCALE = "scale"
    DELETECOLLECTION_BODY_UID = "deletecollection_body_uid"
    LATEST = "latest"
    NAME = "name"
    DELETECOLLECTION_SCOPE = "deletecollection_scope"
    RESOURCE_VERSION = "resource_version"
    # Two users' facts claim the same object version (or deletion): the event resolves to neither.
    CONFLICT = "conflict"
    ABSENT = "absent"
    # Not a lookup result: what `reverser resolve` prints for BOOKMARK and ERROR events.
    NONE = "none"


#: The tiers a lookup answers with, strongest first.
TIERS: Final = tuple(tier for tier in Tier if tier is not Tier.NONE)

#: What each tier joined the watch event and the fact on, in words: `reverser resolve` prints it so
#: an operator can check a match by hand (docs/attribution.md has the full table).
MATCHED_ON: Final[Mapping[Tier, str]] = {
    Tier.DELETE_STICKY: "a delete fact of the event's uid",
    Tier.EXACT: "an audit fact of the event's uid and resourceVersion",
    Tier.ADMISSION: "an admission fact of the event's uid whose content key is the event's content key",
    Tier.SCALE: (
        "an admission fact of a scale of the event's uid to the event's spec.replicas, made from a"
        " version between the one mirrored before the event and the event's"
    ),
    Tier.DELETECOLLECTION_BODY_UID: "a deletecollection fact whose response listed the event's uid",
    Tier.LATEST: "the latest fact of the event's uid, which is a delete",
    Tier.NAME: "the latest fact of the event's namespace and name (a delete for a removal, else a write)",
    Tier.DELETECOLLECTION_SCOPE: (
        "a recent deletecollection fact whose namespace and label selector cover the object"
    ),
    Tier.RESOURCE_VERSION: "a fact of the event's resourceVersion (no uid in the fact)",
    Tier.CONFLICT: "two facts naming different users for the same version: neither is trusted",
    Tier.ABSENT: "no fact within the hold",
    Tier.NONE: "not a change (BOOKMARK, ERROR or an event without an object)",
}


def is_removal_verb(verb: str) -> bool:
    """`delete` and `deletecollection`, case-insensitively."""
    lowered = verb.lower()
    return lowered == "delete" or lowered == "deletecollection"


#: `ActorKind.of`, under the name the attribution API has always used.
actor_kind = ActorKind.of


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

    __slots__ = (
        "at_ms",
        "audit_id",
        "identity",
        "invalid_selector",
        "label_selector",
        "live",
        "namespace",
        "selector",
        "stage_ms",
        "uids",
        "verb",
    )

    def __init__(
        self,
        *,
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
    unknown): a resolution is held until the route's audit watermark passes it. `content_key`
    names the version as an admission fact does (the `admission` tier); `previous_rv` and `replicas`
    let a scale's admission fact name it (the `scale` tier).
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
    # The key of the event's sanitized content, which an admission fact names its version by
    # ("" when unknown: a sealed payload, or a recording without bodies).
    content_key: str = ""
    # The object's previous version the router mirrored ("" when it does not know it) and the
    # event's spec.replicas (-1: none): a scale fact made from a version from `previous_rv` on
    # (and before this one) to this count made this version (pipeline.content.scale).
    previous_rv: str = ""
    replicas: int = -1
    # A snapshot object caught up after a watch gap: its range may hold several writes the watch
    # never saw (only scales, `pipeline.router.versions`), so a scale fact must also be the newest
    # fact of its object (docs/attribution.md, "Scale facts").
    caught_up: bool = False


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
        return self.fact is not None or self.tier == Tier.CONFLICT

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
    def actor_kind(self) -> ActorKind:
        return ActorKind.of(self.author)

    @property
    def resolved(self) -> bool:
        return self.fact is not None and bool(self.fact.identity.author)


ABSENT_ATTRIBUTION: Final = Attribution(Tier.ABSENT, None)
