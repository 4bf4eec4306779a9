"""Attribution: which user or controller made each watched change, from the audit facts on the log.

Public API (the router builds on this; the rules are in docs/attribution.md):

- `FactIndex(limits, clock=time.time)`: the in-memory, bounded, TTL'd index, one per process.
  `FactIndex.from_settings(settings.attribution)` builds it from configuration.
- `FactFollower(log, topics, index, settings)`: fills the index from every partition of
  `<prefix>.audit-facts`; `start()`, `stop()`, `ready()`, `await wait_ready()`.
- `Resolver(index, grace_ms).resolve(query) -> Attribution` (async; many may wait at once).
- `query_from_watch_object(route, gr, event_type, obj)`: the `FactQuery` for a watch event, or
  None for BOOKMARK/ERROR.
- `Attribution`: `tier`, `fact` (None when absent), `author`, `display_name`, `email`,
  `actor_kind` (`user`, `serviceaccount`, `none`), `resolved`.
- Tier names: `TIERS` (strongest first) and the constants `Tier.EXACT`, `Tier.LATEST`, ...
"""

from __future__ import annotations

from pipeline.attribution.follower import FactFollower
from pipeline.attribution.index import FactIndex, IndexLimits
from pipeline.attribution.model import TIERS, Attribution, FactQuery, Tier, actor_kind
from pipeline.attribution.resolver import Resolver, query_from_watch_object

__all__ = [
    "TIERS",
    "Attribution",
    "FactFollower",
    "FactIndex",
    "FactQuery",
    "IndexLimits",
    "Resolver",
    "Tier",
    "actor_kind",
    "query_from_watch_object",
]
