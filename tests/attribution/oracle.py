"""A deliberately naive model of the fact index, written straight from docs/attribution.md.

It keeps upstream's layout (one `order` list of (kind, key, seq) refs per scope, a seq per entry)
so the property tests can check the optimised index against it operation by operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.attribution.model import is_removal_verb
from pipeline.codec.fact_batch import AuthorFact
from pipeline.kube.selector import SelectorError, parse_selector


@dataclass
class Entry:
    fact: AuthorFact
    at: int
    seq: int


@dataclass
class Scope:
    exact: dict[tuple[str, str], Entry] = field(default_factory=dict)
    latest: dict[str, Entry] = field(default_factory=dict)
    removals: dict[str, Entry] = field(default_factory=dict)
    rv_only: dict[str, Entry] = field(default_factory=dict)
    by_name: dict[tuple[str, str], Entry] = field(default_factory=dict)
    collections: list[Entry] = field(default_factory=list)
    conflicts: dict[tuple[str, str | None], Entry] = field(default_factory=dict)
    order: list[tuple[str, Any, int]] = field(default_factory=list)
    count: int = 0

    def structure(self, kind: str) -> dict[Any, Entry]:
        return {
            "conflict": self.conflicts,
            "exact": self.exact,
            "latest": self.latest,
            "removals": self.removals,
            "rv": self.rv_only,
            "name": self.by_name,
        }[kind]  # type: ignore[return-value]


class Oracle:
    def __init__(self, ttl_ms: int, per_type: int, total: int, window_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.per_type = per_type
        self.max_total = total
        self.window_ms = window_ms
        self.scopes: dict[tuple[str, str], Scope] = {}
        self.total = 0
        self.seq = 0
        self.evictions = {"per_type": 0, "total": 0}

    def _put(self, scope: Scope, kind: str, key: Any, fact: AuthorFact, at: int) -> None:
        self.seq += 1
        structure = scope.structure(kind)
        if key not in structure:
            scope.count += 1
            self.total += 1
        structure[key] = Entry(fact, at, self.seq)
        scope.order.append((kind, key, self.seq))

    def apply(self, route: str, gr_key: str, facts: list[AuthorFact], at: int) -> None:
        for fact in facts:
            key = (route, gr_key)
            verb = fact.verb.lower()
            if not (verb == "deletecollection" or fact.uid or fact.resource_version or fact.name):
                continue
            scope = self.scopes.setdefault(key, Scope())
            if verb == "deletecollection":
                self.seq += 1
                scope.collections.append(Entry(fact, at, self.seq))
                scope.order.append(("collection", None, self.seq))
                scope.count += 1
                self.total += 1
            elif fact.uid:
                # A slot another user already holds is not overwritten: it becomes a conflict,
                # filed after the fact's other entries (and evicted after them).
                claims: list[tuple[str, str | None]] = []
                if fact.resource_version:
                    exact_key = (fact.uid, fact.resource_version)
                    held = scope.exact.get(exact_key)
                    if held is not None and held.fact.author != fact.author:
                        claims.append(exact_key)
                    else:
                        self._put(scope, "exact", exact_key, fact, at)
                self._put(scope, "latest", fact.uid, fact, at)
                if verb in ("delete", "deletecollection"):
                    held = scope.removals.get(fact.uid)
                    if held is not None and held.fact.author != fact.author:
                        claims.append((fact.uid, None))
                    else:
                        self._put(scope, "removals", fact.uid, fact, at)
                for claim in claims:
                    if claim not in scope.conflicts:
                        self._put(scope, "conflict", claim, fact, at)
            elif fact.resource_version:
                self._put(scope, "rv", fact.resource_version, fact, at)
            else:
                self._put(scope, "name", (fact.namespace, fact.name), fact, at)
            self._caps(key)

    def _evict(self, scope: Scope) -> None:
        entry: Entry | None
        while scope.order:
            kind, key, seq = scope.order.pop(0)
            if kind == "collection":
                for i, entry in enumerate(scope.collections):
                    if entry.seq == seq:
                        del scope.collections[i]
                        scope.count -= 1
                        return
                continue
            structure = scope.structure(kind)
            entry = structure.get(key)
            if entry is not None and entry.seq == seq:
                del structure[key]
                scope.count -= 1
                return
        raise AssertionError("nothing to evict")

    def _caps(self, key: tuple[str, str]) -> None:
        scope = self.scopes.get(key)
        while scope is not None and scope.count > self.per_type:
            self._evict(scope)
            self.total -= 1
            self.evictions["per_type"] += 1
            if scope.count == 0:
                del self.scopes[key]
                scope = None
        while self.total > self.max_total:
            largest = self._victim(key)
            self._evict(self.scopes[largest])
            self.total -= 1
            self.evictions["total"] += 1
            if self.scopes[largest].count == 0:
                del self.scopes[largest]

    def _victim(self, filing: tuple[str, str]) -> tuple[str, str]:
        """The largest scope of the route with the most entries; ties go to the filing scope/route."""
        routes: dict[str, int] = {}
        for (route, _), scope in self.scopes.items():
            routes[route] = routes.get(route, 0) + scope.count
        top = max(routes.values())
        candidates = [r for r, n in routes.items() if n == top]
        route = filing[0] if filing[0] in candidates else candidates[0]
        sizes = {k: s.count for k, s in self.scopes.items() if k[0] == route}
        biggest = max(sizes.values())
        if sizes.get(filing) == biggest:
            return filing
        return next(k for k, n in sizes.items() if n == biggest)

    def sweep(self, now: int) -> None:
        cutoff = now - self.ttl_ms
        for key in list(self.scopes):
            scope = self.scopes[key]
            for kind in ("exact", "latest", "rv", "name", "conflict"):
                structure = scope.structure(kind)
                for k in [k for k, e in structure.items() if e.at < cutoff]:
                    del structure[k]
                    scope.count -= 1
                    self.total -= 1
            kept = [e for e in scope.collections if e.at >= cutoff]
            self.total -= len(scope.collections) - len(kept)
            scope.count -= len(scope.collections) - len(kept)
            scope.collections = kept
            if scope.count == 0:
                del self.scopes[key]

    def lookup(
        self,
        route: str,
        gr_key: str,
        uid: str,
        rv: str,
        ns: str,
        name: str,
        labels: dict[str, str],
        exact_capable: bool,
        now: int,
    ) -> tuple[str, AuthorFact | None]:
        scope = self.scopes.get((route, gr_key))
        if scope is None:
            return ("absent", None)
        cutoff = now - self.ttl_ms

        def live(entry: Entry | None) -> AuthorFact | None:
            return entry.fact if entry is not None and entry.at >= cutoff else None

        removal = not exact_capable
        if removal and uid and live(scope.conflicts.get((uid, None))) is not None:
            return ("conflict", None)
        if removal and uid and uid in scope.removals:
            return ("delete_sticky", scope.removals[uid].fact)
        held: tuple[str, AuthorFact | None] | None = None
        if uid and rv and live(scope.conflicts.get((uid, rv))) is not None:
            if not removal:
                return ("conflict", None)
            held = ("conflict", None)
        elif uid and rv:
            found = live(scope.exact.get((uid, rv)))
            if found is not None and is_removal_verb(found.verb) == removal:
                return ("exact", found)
        if removal:
            if uid:
                for entry in reversed(scope.collections):
                    if (
                        entry.at >= cutoff
                        and entry.fact.namespace == ns
                        and entry.fact.uids
                        and uid in entry.fact.uids
                    ):
                        return ("deletecollection_body_uid", entry.fact)
                found = live(scope.latest.get(uid))
                if found is not None and is_removal_verb(found.verb):
                    return ("latest", found)
            if name:
                found = live(scope.by_name.get((ns, name)))
                if found is not None and is_removal_verb(found.verb):
                    return ("name", found)
            if held is not None:
                return held
            for entry in reversed(scope.collections):
                f = entry.fact
                start = f.stage_timestamp_us // 1000 if f.stage_timestamp_us > 0 else entry.at
                if entry.at < cutoff or f.namespace != ns or now > start + self.window_ms:
                    continue
                text = f.label_selector or ""
                if not text:
                    return ("deletecollection_scope", f)
                try:
                    if parse_selector(text).matches(labels):
                        return ("deletecollection_scope", f)
                except SelectorError:
                    continue
        # Every tier names a fact of the event's own kind of operation: deletions for removals.
        if rv:
            found = live(scope.rv_only.get(rv))
            if found is not None and is_removal_verb(found.verb) == removal:
                return ("resource_version", found)
        if name and not removal:
            found = live(scope.by_name.get((ns, name)))
            if found is not None and not is_removal_verb(found.verb):
                return ("name", found)
        return ("absent", None)
