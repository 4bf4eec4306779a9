"""The fact index: audit facts filed per (route, group/resource) and the tiered join against them.

One index per process, fed in log order by the follower, read by many concurrent resolutions. It
lives on one asyncio loop (no locks: filing and lookup are synchronous). Every structure is keyed
inside a scope `(route, grKey)`, so a fact from one cluster route can never name the author of an
object watched on another. Tiers, TTL-on-read, caps and the sweep follow docs/attribution.md.

Memory layout (the index must hold 65,536 entries in a few dozen MB): a fact is one plain tuple
(`_Fact`) shared by every structure it is filed in; `lookup` hands out a `StoredFact` built from it.
Plain tuples of strings and ints matter: CPython's collector stops tracking them after one pass,
whereas a NamedTuple stays tracked forever, so a full index of NamedTuples made every full
collection walk all of them. Each scope keeps one `order` deque with one reference per filing,
oldest first. Eviction pops from its left, so an evicted fact is released at once, during the
start-up replay as in steady state; a reference that no structure holds any more (replaced or
swept) is stale, skipped by eviction and dropped by compaction, which runs whenever stale
references outnumber the live entries. Memory is therefore bounded by the caps, never by the
ingest rate x TTL. Verbs, namespaces and identities are shared objects.

Every tier names only a fact of the same kind of operation as the event (docs/attribution.md,
"Removals are credited only to deletions"): a removal is matched only to deletion evidence (a
delete, a deletecollection) or to a conflict, never to a write, so neither the object's last editor
(`latest`) nor a finalizer controller's patch that carries the deletion-stamped resourceVersion
(`exact`) is credited with a delete whose own fact has not arrived yet; a write is never matched to
a delete fact.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final

from pipeline.attribution import metrics
from pipeline.attribution.model import (
    ABSENT_ATTRIBUTION,
    Attribution,
    FactQuery,
    Identity,
    StoredCollection,
    StoredFact,
    Tier,
    is_removal_verb,
)
from pipeline.attribution.watermark import Watermarks
from pipeline.codec.fact_batch import AuthorFact, FactRow, fact_row
from pipeline.config import AttributionSettings
from pipeline.content.scale import SCALE_KEY_PREFIX, parse_scale_key
from pipeline.kube.selector import SelectorError, parse_selector
from pipeline.models import GroupResource, compare_versions

__all__ = ["NAME_STAMP_MARGIN_MS", "FactIndex", "IndexLimits", "stamped_by"]

logger = logging.getLogger(__name__)


# Waiter key kinds (the second element of a waiter key).
_K_EXACT: Final = 1
_K_LATEST: Final = 2
_K_RV: Final = 3
_K_NAME: Final = 4
_K_COLLECTION: Final = 5
_K_WATERMARK: Final = 6

_IDENTITY_CACHE_MAX: Final = 16_384
_SHARED_STRINGS_MAX: Final = 16_384
_ORDER_SLACK: Final = 64

_EVICTED_PER_TYPE: Final = metrics.EVICTIONS.labels("per_type")
_EVICTED_TOTAL: Final = metrics.EVICTIONS.labels("total")

# tuple.__new__ skips the Python-level NamedTuple constructor.
_new_tuple: Final = tuple.__new__

ScopeKey = tuple[str, str]
WaiterKey = tuple[Any, ...]
# A filed fact: (who, verb, auditID, namespace, name, uid, resourceVersion, append ms, stage µs),
# where who = (author, displayName, email); the field order of `StoredFact`, except that the stage
# time is kept as the record carried it (µs, the row's own int: no per-fact conversion or new
# object while filing) and converted to `StoredFact.stage_ms` only when a lookup answers.
Who = tuple[str, str, str]
_Fact = tuple[Who, str, str, str, str, str, str, int, int]
_VERB: Final = 1
_AT_MS: Final = 7
_STAGE_US: Final = 8
Stored = _Fact | StoredCollection

#: How much later than an event's observation a fact found only by name may be stamped and still be
#: the request that made the change: the watch can see a change a moment before its request's
#: response completes (the audit stage time). A name-keyed fact stamped later is a later request's
#: on the same name (a scale after the create it would otherwise be credited with).
NAME_STAMP_MARGIN_MS: Final = 2000


def stamped_by(stage_ms: int, event_ms: int) -> bool:
    """Whether a fact stamped at `stage_ms` may have made a change observed at `event_ms`; an
    unknown time on either side (0) does not rule it out."""
    return stage_ms <= 0 or event_ms <= 0 or stage_ms <= event_ms + NAME_STAMP_MARGIN_MS


def _answer(fact: _Fact) -> StoredFact:
    """The `StoredFact` a lookup answers with for a filed fact."""
    who, verb, audit_id, namespace, name, uid, rv, at_ms, stage_us = fact
    stage_ms = stage_us // 1000 if stage_us > 0 else 0
    return _new_tuple(
        StoredFact, (_new_tuple(Identity, who), verb, audit_id, namespace, name, uid, rv, at_ms, stage_ms)
    )


def _conflict(claim: tuple[_Fact, _Fact]) -> Attribution:
    """The answer for a slot two users claimed: no fact, both candidates."""
    return Attribution(Tier.CONFLICT, None, (_answer(claim[0]), _answer(claim[1])))


def _scaled(scope: _Scope, query: FactQuery, cutoff: int) -> _Fact | Attribution | None:
    """The scale fact that made the event's version, a conflict, or None (docs/attribution.md,
    "Scale facts").

    The version a scale makes is the first after the one it started from, with its count. Every
    version between the one the router mirrored before the event (`previous_rv`) and the event's
    changed nothing mirrored, so no successful scale started there except the event's own: a fact
    of the event's count started from a version in [previous_rv, event) is its scale. Without
    `previous_rv`, or with versions that do not compare, nothing is claimed.

    A snapshot object caught up after a watch gap (`caught_up`) may have been scaled several times
    in its range (the router vouches that nothing but the count changed). Its fact must then be
    the last write with a fact: no scale fact of another count started after it, and no other fact
    of the object filed after it.
    """
    if not query.previous_rv or query.replicas < 0:
        return None
    facts: list[tuple[int, _Fact]] = []
    last_other_count = -1  # the newest start in the range of a scale to another count
    for key in scope.scale_keys(query.uid):
        parsed = parse_scale_key(key)
        if parsed is None:
            continue
        started = parsed[0]
        if compare_versions(started, query.resource_version) != -1:
            continue
        if compare_versions(query.previous_rv, started) not in (-1, 0):
            continue
        if parsed[1] != query.replicas:
            if query.caught_up and _held(scope, (query.uid, key), cutoff):
                last_other_count = max(last_other_count, int(started))
            continue
        claim = scope.conflicts.get((query.uid, key)) if scope.conflicts else None
        if claim is not None and claim[1][_AT_MS] >= cutoff:
            return _conflict(claim)
        fact = scope.exact.get((query.uid, key))
        if fact is not None and fact[_AT_MS] >= cutoff and not is_removal_verb(fact[_VERB]):
            facts.append((int(started), fact))
    if not facts:
        return None
    started_newest, newest = max(facts)
    other = next((fact for _, fact in facts if fact[0][0] != newest[0][0]), None)
    if other is not None:
        # two users' scales to this count both started in the range: neither is trusted
        return _conflict((other, newest))
    if query.caught_up:
        if last_other_count > started_newest:
            return None  # the count changed again after it; what set it back has no fact here
        latest = scope.latest.get(query.uid)
        if latest is not None and latest is not newest:
            # a later write: another user's is a rival for the version, the same user's changed
            # the count (a content fact of the final version would have answered first)
            return _conflict((latest, newest)) if latest[0][0] != newest[0][0] else None
    return newest


def _held(scope: _Scope, slot: tuple[str, str], cutoff: int) -> bool:
    """Whether a fact (or a claim of two) in the exact slot is still within its TTL."""
    fact = scope.exact.get(slot)
    if fact is not None and fact[_AT_MS] >= cutoff:
        return True
    claim = scope.conflicts.get(slot) if scope.conflicts else None
    return claim is not None and claim[1][_AT_MS] >= cutoff


#: The `attribution` section's defaults: the one place the index's limits are written down.
_DEFAULTS: Final = AttributionSettings()


class IndexLimits:
    """TTL, caps and the collection window; zero or negative values fall back to the defaults of
    the `attribution` section (pipeline.config), which owns them."""

    __slots__ = ("collection_window_ms", "max_facts", "max_facts_per_type", "ttl_ms")

    def __init__(
        self,
        ttl_s: float = _DEFAULTS.ttl_s,
        max_facts_per_type: int = _DEFAULTS.max_facts_per_type,
        max_facts: int = _DEFAULTS.max_facts,
        collection_window_s: float = _DEFAULTS.collection_window_s,
    ) -> None:
        self.ttl_ms = int((ttl_s if ttl_s > 0 else _DEFAULTS.ttl_s) * 1000)
        per_type = max_facts_per_type
        self.max_facts_per_type = per_type if per_type > 0 else _DEFAULTS.max_facts_per_type
        self.max_facts = max_facts if max_facts > 0 else _DEFAULTS.max_facts
        self.collection_window_ms = int(
            (collection_window_s if collection_window_s > 0 else _DEFAULTS.collection_window_s) * 1000
        )

    @classmethod
    def from_settings(cls, settings: AttributionSettings) -> IndexLimits:
        """The limits the `attribution` section configures."""
        return cls(
            settings.ttl_s, settings.max_facts_per_type, settings.max_facts, settings.collection_window_s
        )


class _Scope:
    """Everything filed for one (route, group/resource)."""

    __slots__ = (
        "by_name",
        "collections",
        "conflicts",
        "count",
        "exact",
        "latest",
        "order",
        "removals",
        "route",
        "rv_only",
        "scales",
        "stale",
    )

    def __init__(self, route: str) -> None:
        self.route = route
        self.exact: dict[tuple[str, str], _Fact] = {}
        self.latest: dict[str, _Fact] = {}
        self.removals: dict[str, _Fact] = {}
        self.rv_only: dict[str, _Fact] = {}
        self.by_name: dict[tuple[str, str], _Fact] = {}
        # uid -> the scale keys its exact slots were filed under (pipeline.content.scale): a scale
        # fact is found by a range of versions, not one key. Not entries of their own: a key whose
        # slot is gone is dropped when next seen, and by the sweep.
        self.scales: dict[str, set[str]] = {}
        self.collections: deque[StoredCollection] = deque()
        # (uid, rv) of an exact slot, or (uid, None) of a sticky removal slot, claimed by two
        # different users: (the first fact, the later conflicting one). Counts as one entry.
        self.conflicts: dict[tuple[str, str | None], tuple[_Fact, _Fact]] = {}
        self.order: deque[Stored] = deque()
        self.count = 0
        # References in `order` that no structure holds any more (replaced facts).
        self.stale = 0

    def evict(self, wanted: int) -> int:
        """Drop up to `wanted` oldest live entries (stale references are skipped); returns how many.

        One filing's entries are evicted in the order it inserted them: exact, latest, removals,
        then a conflict it started. Every reference is popped off the order as its filing goes, so
        nothing evicted stays referenced. At the per-type cap every new fact evicts one or two
        entries, so this runs per fact: the structures are read into locals once per call rather
        than once per entry.
        """
        order = self.order
        exact, latest, removals, conflicts = self.exact, self.latest, self.removals, self.conflicts
        evicted = 0
        while evicted < wanted and order:
            ref = order.popleft()
            if isinstance(ref, StoredCollection):
                if ref.live:
                    if self.collections.popleft() is not ref:
                        raise AssertionError("collection order diverged from the eviction order")
                    ref.live = False
                    evicted += 1
                else:
                    self.stale -= 1
                continue
            before = evicted
            _who, _verb, _audit_id, namespace, name, uid, rv, _at, _stage = ref
            if uid:
                # The filing may hold up to four entries. If the budget runs out before one of them,
                # the filing goes back to the front and the next call resumes with that entry.
                if rv and exact.get((uid, rv)) is ref:
                    del exact[(uid, rv)]
                    evicted += 1
                if latest.get(uid) is ref:
                    if evicted == wanted:
                        order.appendleft(ref)
                        break
                    del latest[uid]
                    evicted += 1
                if removals.get(uid) is ref:
                    if evicted == wanted:
                        order.appendleft(ref)
                        break
                    del removals[uid]
                    evicted += 1
                if conflicts:
                    for key in ((uid, rv), (uid, None)):
                        claim = conflicts.get(key)
                        if claim is not None and claim[1] is ref:
                            if evicted == wanted:
                                order.appendleft(ref)
                                self.count -= evicted
                                return evicted
                            del conflicts[key]
                            evicted += 1
            elif rv:
                if self.rv_only.get(rv) is ref:
                    del self.rv_only[rv]
                    evicted += 1
            elif self.by_name.get((namespace, name)) is ref:
                del self.by_name[(namespace, name)]
                evicted += 1
            if evicted == before:
                self.stale -= 1
        self.count -= evicted
        return evicted

    def holds(self, ref: Stored) -> bool:
        """Whether any structure still holds this filing."""
        if isinstance(ref, StoredCollection):
            return ref.live
        _who, _verb, _audit_id, namespace, name, uid, rv, _at, _stage = ref
        if uid:
            if (
                (bool(rv) and self.exact.get((uid, rv)) is ref)
                or self.latest.get(uid) is ref
                or self.removals.get(uid) is ref
            ):
                return True
            if self.conflicts:
                return any(
                    claim is not None and claim[1] is ref
                    for claim in (self.conflicts.get((uid, rv)), self.conflicts.get((uid, None)))
                )
            return False
        if rv:
            return self.rv_only.get(rv) is ref
        return self.by_name.get((namespace, name)) is ref

    def replaced(self, old: _Fact) -> None:
        """Note that a structure dropped `old` for a newer fact; compact once stale references dominate.

        Stale references keep their facts alive, so they may not outnumber the live filings by more
        than a quarter (plus a little slack): memory stays within a constant of the caps.
        """
        if not self.holds(old):
            self.stale += 1
            if self.stale > (len(self.order) - self.stale) // 4 + _ORDER_SLACK:
                self.compact()

    def compact(self) -> None:
        """Drop stale references and reallocate, so a rewrite storm gives its memory back."""
        self.order = deque(ref for ref in self.order if self.holds(ref))
        self.stale = 0
        for uid in list(self.scales):
            self.scale_keys(uid)

    def scale_keys(self, uid: str) -> list[str]:
        """The scale keys of `uid` whose exact slot (or conflict) is still held; drops the others."""
        keys = self.scales.get(uid)
        if not keys:
            return []
        conflicts = self.conflicts
        gone = [k for k in keys if (uid, k) not in self.exact and (uid, k) not in conflicts]
        keys.difference_update(gone)
        if not keys:
            del self.scales[uid]
        return list(keys)

    def expire(self, cutoff_ms: int) -> int:
        """Remove TTL-expired entries (never the sticky removals); returns how many."""
        removed = 0
        structures: tuple[dict[Any, _Fact], ...] = (self.exact, self.latest, self.rv_only, self.by_name)
        for structure in structures:
            dead = [key for key, fact in structure.items() if fact[_AT_MS] < cutoff_ms]
            for key in dead:
                del structure[key]
            removed += len(dead)
        if self.collections and any(c.at_ms < cutoff_ms for c in self.collections):
            kept: deque[StoredCollection] = deque()
            for collection in self.collections:
                if collection.at_ms < cutoff_ms:
                    collection.live = False
                    removed += 1
                else:
                    kept.append(collection)
            self.collections = kept
        if self.conflicts:
            dead_claims = [key for key, claim in self.conflicts.items() if claim[1][_AT_MS] < cutoff_ms]
            for claim_key in dead_claims:
                del self.conflicts[claim_key]
            removed += len(dead_claims)
        self.count -= removed
        return removed


class _Waiter:
    """One pending resolution: a coalescing, payload-free wake flag."""

    __slots__ = ("event", "keys")

    def __init__(self, keys: tuple[WaiterKey, ...]) -> None:
        self.keys = keys
        self.event = asyncio.Event()


class FactIndex:
    """Bounded, TTL'd, route-isolated index of author facts with register-then-check waiters.

    `clock` returns wall-clock seconds (injectable for tests); TTL and the collection window are
    measured against it. Not thread-safe: use it from one event loop.
    """

    def __init__(
        self,
        limits: IndexLimits | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits or IndexLimits()
        self.clock = clock
        self._scopes: dict[ScopeKey, _Scope] = {}
        self._total = 0
        self._waiters: dict[WaiterKey, set[_Waiter]] = {}
        # Keyed by the username alone when a fact carries no display name or email.
        self._identities: dict[str | Who, Who] = {}
        # Verbs and namespaces repeat across thousands of facts: keep one string object each.
        self._shared: dict[str, str] = {}
        self._verbs: dict[str, tuple[str, str]] = {}  # verb -> (shared verb, lower-cased)
        self.evictions: dict[str, int] = {"per_type": 0, "total": 0}
        self.conflicts = 0  # conflicting claims filed (see `_claim`)
        # Per route, the newest audit event time filed (pipeline/attribution/watermark.py).
        self.watermarks = Watermarks()

    @classmethod
    def from_settings(
        cls, settings: AttributionSettings, *, clock: Callable[[], float] = time.time
    ) -> FactIndex:
        """The index configured by the `attribution` section."""
        return cls(IndexLimits.from_settings(settings), clock=clock)

    # -- sizes -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Entries held (a uid+rv write is 2: exact and latest)."""
        return self._total

    def scope_size(self, route: str, gr: GroupResource) -> int:
        scope = self._scopes.get((route, gr.key))
        return scope.count if scope is not None else 0

    def scope_count(self) -> int:
        return len(self._scopes)

    def scope_sizes(self) -> dict[str, int]:
        """Entries per scope, keyed `<route>/<grKey>` (the stream name used in metrics and logs)."""
        return {f"{route}/{gr_key}": scope.count for (route, gr_key), scope in sorted(self._scopes.items())}

    def waiter_count(self) -> int:
        """Registered waiter keys; 0 whenever no resolution is in flight."""
        return len(self._waiters)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def watermark(self, route: str) -> int:
        """How far audit time on the route has advanced in the facts filed (ms; 0 if unknown)."""
        return self.watermarks.of(route)

    # -- filing ------------------------------------------------------------------------------------
    def apply(
        self, route: str, gr: GroupResource, facts: Iterable[AuthorFact], append_ms: int | None = None
    ) -> int:
        """File facts of one record in order; they share its append time. Returns entries added."""
        return self.apply_records(route, gr.key, [fact_row(fact) for fact in facts], append_ms)

    def apply_records(
        self,
        route: str,
        gr_key: str,
        facts: Iterable[FactRow],
        append_ms: int | None = None,
    ) -> int:
        """File facts given as rows (the follower's fast path, see `FactRow`).

        `append_ms` is the record's append time; None, 0 or negative means now, and a time in the
        future is clamped to now so no fact ages slower than the clock.
        """
        now = self.now_ms()
        at = now if append_ms is None or append_ms <= 0 or append_ms > now else append_ms
        key = (route, gr_key)
        scope = self._scopes.get(key)
        before = self._total
        identities = self._identities
        shared = self._shared
        if len(shared) >= _SHARED_STRINGS_MAX:
            shared.clear()
        verbs = self._verbs
        if len(verbs) >= _SHARED_STRINGS_MAX:
            verbs.clear()
        per_type = self.limits.max_facts_per_type
        max_total = self.limits.max_facts
        evicted_per_type = evicted_total = 0
        newest_us = 0
        for row in facts:
            author, display, email, verb, audit_id, namespace, name, uid, rv, stage_us, _, _ = row
            if stage_us > newest_us:
                newest_us = stage_us
            key_who: str | Who = (author, display, email) if display or email else author
            who = identities.get(key_who)
            if who is None:
                if len(identities) >= _IDENTITY_CACHE_MAX:
                    identities.clear()
                who = identities[key_who] = (author, display, email)
            known = verbs.get(verb)
            if known is None:
                known = verbs[verb] = (verb, verb.lower())
            verb, lowered = known
            namespace = shared.setdefault(namespace, namespace)
            if scope is None:
                if not (uid or rv or name or lowered == "deletecollection"):
                    continue
                scope = self._scopes[key] = _Scope(route)
            if lowered == "deletecollection":
                self._file_collection(scope, who, verb, namespace, row, at)
            elif uid:
                stored: _Fact = (who, verb, audit_id, namespace, name, uid, rv, at, stage_us)
                if rv.startswith(SCALE_KEY_PREFIX):
                    scope.scales.setdefault(uid, set()).add(rv)
                added = 0
                old_exact = old_removal = None
                if rv:
                    exact_key = (uid, rv)
                    old_exact = scope.exact.get(exact_key)
                    if old_exact is None:
                        added += 1
                        scope.exact[exact_key] = stored
                    elif old_exact[0][0] != author:
                        # A second user claims the same object version: it cannot overrule the
                        # first, and neither is trusted from now on (see docs/attribution.md).
                        added += self._claim(scope, exact_key, old_exact, stored)
                        old_exact = None
                    else:
                        scope.exact[exact_key] = stored
                old_latest = scope.latest.get(uid)
                if old_latest is None:
                    added += 1
                scope.latest[uid] = stored
                if lowered == "delete":
                    old_removal = scope.removals.get(uid)
                    if old_removal is None:
                        added += 1
                        scope.removals[uid] = stored
                    elif old_removal[0][0] != author:
                        added += self._claim(scope, (uid, None), old_removal, stored)
                        old_removal = None
                    else:
                        scope.removals[uid] = stored
                scope.order.append(stored)
                scope.count += added
                self._total += added
                if old_latest is not None:
                    scope.replaced(old_latest)
                if old_exact is not None and old_exact is not old_latest:
                    scope.replaced(old_exact)
                if old_removal is not None and old_removal is not old_latest and old_removal is not old_exact:
                    scope.replaced(old_removal)
            elif rv:
                stored = (who, verb, audit_id, namespace, name, "", rv, at, stage_us)
                scope.order.append(stored)
                self._put(scope, scope.rv_only, rv, stored)
            elif name:
                stored = (who, verb, audit_id, namespace, name, "", "", at, stage_us)
                scope.order.append(stored)
                self._put(scope, scope.by_name, (namespace, name), stored)
            else:
                continue
            if scope.count > per_type:
                # Steady state at the per-type cap: one or two entries out per fact.
                # (never down to zero: per_type is at least 1, so the scope stays)
                evicted = scope.evict(scope.count - per_type)
                self._total -= evicted
                evicted_per_type += evicted
            if self._total > max_total:
                evicted_total += self._evict_total(key)
                scope = self._scopes.get(key)
            if self._waiters:
                self._wake(self._wake_keys(key, lowered, namespace, name, uid, rv))
        # A stage time ahead of this clock (skew, or a forged fact) moves the watermark only to now.
        if newest_us and self.watermarks.advance(route, min(newest_us // 1000, now)) and self._waiters:
            self._wake(((route, _K_WATERMARK),))
        if evicted_per_type:
            self.evictions["per_type"] += evicted_per_type
            _EVICTED_PER_TYPE.inc(evicted_per_type)
        if evicted_total:
            self.evictions["total"] += evicted_total
            _EVICTED_TOTAL.inc(evicted_total)
        return self._total - before

    @staticmethod
    def _wake_keys(
        key: ScopeKey, lowered: str, namespace: str, name: str, uid: str, rv: str
    ) -> tuple[WaiterKey, ...]:
        """The waiter keys a just-filed fact satisfies (mirrors `register`)."""
        if lowered == "deletecollection":
            return ((key, _K_COLLECTION, namespace),)
        if uid:
            return ((key, _K_EXACT, uid, rv), (key, _K_LATEST, uid)) if rv else ((key, _K_LATEST, uid),)
        if rv:
            return ((key, _K_RV, rv),)
        return ((key, _K_NAME, namespace, name),)

    def _put(self, scope: _Scope, structure: dict[Any, _Fact], key: Any, stored: _Fact) -> None:
        old = structure.get(key)
        structure[key] = stored
        if old is None:
            scope.count += 1
            self._total += 1
        else:
            scope.replaced(old)

    def _claim(self, scope: _Scope, key: tuple[str, str | None], first: _Fact, later: _Fact) -> int:
        """File a conflict between two users' facts for one slot; returns the entries added (0 or 1).

        Only the first conflict of a slot is kept (a third claimant changes nothing: the slot is
        already untrusted). It lives as long as the later fact, so it ages and is evicted with it.
        """
        if key in scope.conflicts:
            return 0
        scope.conflicts[key] = (first, later)
        self.conflicts += 1
        metrics.CONFLICTS.labels(scope.route).inc()
        logger.info(
            "attribution: conflicting facts for %s %s: %r (audit %s) and %r (audit %s); the event "
            "resolves to neither",
            "uid/resourceVersion" if key[1] is not None else "the deletion of uid",
            "/".join(k for k in key if k is not None),
            first[0][0],
            first[2],
            later[0][0],
            later[2],
        )
        return 1

    def _file_collection(
        self, scope: _Scope, who: Who, verb: str, namespace: str, row: FactRow, at: int
    ) -> None:
        """File a deletecollection row; `verb` and `namespace` are the row's, already shared."""
        _, _, _, _, audit_id, _, _, _, _, stage_us, label_selector, uids = row
        text = label_selector or ""
        selector = None
        invalid = False
        if text:
            try:
                selector = parse_selector(text)
            except SelectorError as exc:
                invalid = True
                logger.info("collection fact %s: invalid label selector %r: %s", audit_id, text, exc)
        stored = StoredCollection(
            identity=_new_tuple(Identity, who),
            verb=verb,
            audit_id=audit_id,
            namespace=namespace,
            label_selector=text,
            selector=selector,
            invalid_selector=invalid,
            uids=frozenset(uids) if uids else None,
            stage_ms=stage_us // 1000 if stage_us > 0 else 0,
            at_ms=at,
        )
        scope.collections.append(stored)
        scope.order.append(stored)
        scope.count += 1
        self._total += 1

    def _evict_total(self, filing: ScopeKey) -> int:
        """Evict until the whole index is within its cap; returns how many entries went.

        Each entry comes from the largest scope of the route holding the most entries (a tie goes
        to the scope being filed, then to its route), so a flood on one route never takes entries
        from another route below an equal share, and within a route a flooding type only takes
        other types down to an equal share.
        """
        evicted = 0
        scopes = self._scopes
        while self._total > self.limits.max_facts and scopes:
            victim_key = self._victim(filing)
            victim = scopes[victim_key]
            if not victim.evict(1):
                break
            self._total -= 1
            evicted += 1
            if victim.count == 0:
                del scopes[victim_key]
        return evicted

    def _victim(self, filing: ScopeKey) -> ScopeKey:
        """The scope that gives up an entry when the total cap is exceeded (see `_evict_total`)."""
        routes: dict[str, int] = {}
        for (route, _gr_key), scope in self._scopes.items():
            routes[route] = routes.get(route, 0) + scope.count
        top = max(routes.values())
        route = filing[0] if routes.get(filing[0]) == top else max(routes, key=routes.__getitem__)
        scopes = self._scopes
        return max(
            (key for key in scopes if key[0] == route), key=lambda key: (scopes[key].count, key == filing)
        )

    # -- waiters -----------------------------------------------------------------------------------
    def _wake(self, keys: tuple[WaiterKey, ...]) -> None:
        waiters = self._waiters
        for key in keys:
            found = waiters.get(key)
            if found:
                for waiter in found:
                    waiter.event.set()

    def register(self, query: FactQuery) -> _Waiter:
        """Register a waiter on every key a fact satisfying `query` would wake (before looking up)."""
        scope: ScopeKey = (query.route, query.group_resource.key)
        uid, rv, ns, name = query.uid, query.resource_version, query.namespace, query.name
        keys: list[WaiterKey] = []
        if uid and rv:
            keys.append((scope, _K_EXACT, uid, rv))
        if uid and query.content_key and query.exact_capable:
            keys.append((scope, _K_EXACT, uid, query.content_key))
        if uid and (not query.exact_capable or query.replicas >= 0):
            # (every fact of the uid wakes it: a scale fact's key is not known in advance)
            keys.append((scope, _K_LATEST, uid))
        if not query.exact_capable:
            keys.append((scope, _K_COLLECTION, ns))
        if rv:
            keys.append((scope, _K_RV, rv))
        if name:
            keys.append((scope, _K_NAME, ns, name))
        if query.event_ms > 0:
            keys.append((query.route, _K_WATERMARK))
        waiter = _Waiter(tuple(keys))
        for key in waiter.keys:
            self._waiters.setdefault(key, set()).add(waiter)
        return waiter

    def unregister(self, waiter: _Waiter) -> None:
        """Remove the waiter from every key and delete keys left empty (idempotent)."""
        for key in waiter.keys:
            found = self._waiters.get(key)
            if found is not None:
                found.discard(waiter)
                if not found:
                    del self._waiters[key]

    # -- lookup ------------------------------------------------------------------------------------
    def lookup(self, query: FactQuery) -> Attribution:
        """One pass over the tiers, strongest first (see docs/attribution.md for the table)."""
        scope = self._scopes.get((query.route, query.group_resource.key))
        if scope is None:
            return ABSENT_ATTRIBUTION
        now = self.now_ms()
        cutoff = now - self.limits.ttl_ms
        uid = query.uid
        rv = query.resource_version
        removal = not query.exact_capable
        conflicts = scope.conflicts
        if removal and uid:
            if conflicts:
                claim = conflicts.get((uid, None))
                if claim is not None and claim[1][_AT_MS] >= cutoff:
                    return _conflict(claim)
            sticky = scope.removals.get(uid)
            if sticky is not None:
                return Attribution(Tier.DELETE_STICKY, _answer(sticky))
        held: Attribution | None = None
        admitted: _Fact | None = None
        admitted_tier = Tier.ADMISSION
        if uid and query.content_key and not removal:
            # The admission slots (by content, then by scale) are looked at first so the two sources
            # can be held to agree.
            key = query.content_key
            claim = conflicts.get((uid, key)) if conflicts else None
            if claim is not None and claim[1][_AT_MS] >= cutoff:
                return _conflict(claim)
            fact = scope.exact.get((uid, key))
            if fact is not None and fact[_AT_MS] >= cutoff and not is_removal_verb(fact[_VERB]):
                admitted = fact
        if admitted is None and uid and not removal and scope.scales:
            scaled = _scaled(scope, query, cutoff)
            if isinstance(scaled, Attribution):
                return scaled
            if scaled is not None:
                admitted, admitted_tier = scaled, Tier.SCALE
        if uid and rv:
            claim = conflicts.get((uid, rv)) if conflicts else None
            if claim is not None and claim[1][_AT_MS] >= cutoff:
                if not removal:
                    return _conflict(claim)
                # A removal may still find deletion evidence; the conflict outranks every write.
                held = _conflict(claim)
            else:
                fact = scope.exact.get((uid, rv))
                if fact is not None and fact[_AT_MS] >= cutoff and is_removal_verb(fact[_VERB]) == removal:
                    if admitted is not None and admitted[0][0] != fact[0][0]:
                        # audit and admission name different users for one version: neither wins
                        return _conflict((fact, admitted))
                    return Attribution(Tier.EXACT, _answer(fact))
        if admitted is not None:
            return Attribution(admitted_tier, _answer(admitted))
        if removal:
            found = self._removal_ladder(scope, query, cutoff, now, held)
            if found is not None:
                return found
        if rv:
            fact = scope.rv_only.get(rv)
            if fact is not None and fact[_AT_MS] >= cutoff and is_removal_verb(fact[_VERB]) == removal:
                return Attribution(Tier.RESOURCE_VERSION, _answer(fact))
        if query.name and not removal:
            # (a removal's name-keyed delete was looked at in its ladder)
            fact = scope.by_name.get((query.namespace, query.name))
            if (
                fact is not None
                and fact[_AT_MS] >= cutoff
                and not is_removal_verb(fact[_VERB])
                and stamped_by(fact[_STAGE_US] // 1000, query.event_ms)
            ):
                return Attribution(Tier.NAME, _answer(fact))
        return ABSENT_ATTRIBUTION

    def creator(self, route: str, gr: GroupResource, uid: str) -> StoredFact | None:
        """The fact of the object's create while it is the newest fact filed for its uid (None
        after a later write, or past the TTL): who submitted a command object such as a
        CommitRequest, which is created once and then only changed by the controller's status."""
        scope = self._scopes.get((route, gr.key))
        fact = scope.latest.get(uid) if scope is not None and uid else None
        if fact is None or fact[_AT_MS] < self.now_ms() - self.limits.ttl_ms:
            return None
        return _answer(fact) if fact[_VERB].lower() == "create" else None

    def _removal_ladder(
        self, scope: _Scope, query: FactQuery, cutoff: int, now: int, held: Attribution | None
    ) -> Attribution | None:
        """Deletion evidence for a removal; `held` (a conflicting exact slot) outranks the scope tier."""
        uid = query.uid
        namespace = query.namespace
        if uid:
            for collection in reversed(scope.collections):
                if (
                    collection.at_ms >= cutoff
                    and collection.namespace == namespace
                    and collection.uids is not None
                    and uid in collection.uids
                ):
                    return Attribution(Tier.DELETECOLLECTION_BODY_UID, collection)
            # The last writer is never a removal's answer: only a delete in the latest slot is.
            fact = scope.latest.get(uid)
            if fact is not None and fact[_AT_MS] >= cutoff and is_removal_verb(fact[_VERB]):
                return Attribution(Tier.LATEST, _answer(fact))
        if query.name:
            fact = scope.by_name.get((namespace, query.name))
            if fact is not None and fact[_AT_MS] >= cutoff and is_removal_verb(fact[_VERB]):
                return Attribution(Tier.NAME, _answer(fact))
        if held is not None:
            return held
        window = self.limits.collection_window_ms
        labels = query.labels
        for collection in reversed(scope.collections):
            if collection.at_ms < cutoff or collection.namespace != namespace:
                continue
            if now > (collection.stage_ms or collection.at_ms) + window:
                continue
            if collection.invalid_selector:
                continue
            selector = collection.selector
            if selector is None or selector.matches(labels):
                return Attribution(Tier.DELETECOLLECTION_SCOPE, collection)
        return None

    def deletion_candidates(
        self, route: str, gr: GroupResource, namespace: str
    ) -> list[tuple[str, str, str]]:
        """`(uid, namespace, name)` of every object this scope holds deletion evidence for.

        `namespace` "" means every namespace (a cluster-wide or cluster-scoped stream). Evidence is a
        uid's delete slot (or its conflict), a live collection that listed the uid (name unknown:
        ""), or a name-keyed delete (uid unknown: ""). Each candidate is then resolved by `lookup`
        as a removal, so what answers it is exactly what would answer that object's DELETED event.
        Used for objects a snapshot shows only as an absence (docs/commit-worker.md, prune matrix).
        """
        scope = self._scopes.get((route, gr.key))
        if scope is None:
            return []
        cutoff = self.now_ms() - self.limits.ttl_ms
        found: dict[str, tuple[str, str, str]] = {}

        def wanted(ns: str) -> bool:
            return not namespace or ns == namespace

        for uid, fact in scope.removals.items():
            if wanted(fact[3]):
                found[uid] = (uid, fact[3], fact[4])
        for (uid, rv), (first, _later) in scope.conflicts.items():
            if rv is None and uid not in found and wanted(first[3]):
                found[uid] = (uid, first[3], first[4])
        for collection in scope.collections:
            if collection.at_ms < cutoff or collection.uids is None or not wanted(collection.namespace):
                continue
            for uid in collection.uids:
                found.setdefault(uid, (uid, collection.namespace, ""))
        named = [
            ("", ns, name)
            for (ns, name), fact in scope.by_name.items()
            if fact[_AT_MS] >= cutoff and is_removal_verb(fact[_VERB]) and wanted(ns)
        ]
        return [*found.values(), *named]

    # -- maintenance -------------------------------------------------------------------------------
    def sweep(self) -> int:
        """Reclaim memory of expired entries (reads already ignore them); returns entries removed."""
        cutoff = self.now_ms() - self.limits.ttl_ms
        removed = 0
        for key in list(self._scopes):
            scope = self._scopes[key]
            gone = scope.expire(cutoff)
            removed += gone
            scope.compact()
            if scope.count == 0:
                del self._scopes[key]
        self._total -= removed
        metrics.INDEX_ENTRIES.set(self._total)
        return removed

    def order_length(self, route: str, gr: GroupResource) -> int:
        """References the scope's eviction order really holds (stale ones included), for memory tests."""
        scope = self._scopes.get((route, gr.key))
        return len(scope.order) if scope is not None else 0
