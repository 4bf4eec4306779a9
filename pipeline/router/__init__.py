"""The resolver/router stage: watch events in, attributed per-branch work items out.

It reads `<prefix>.watch-events` as a consumer group, names the author of every live event
through the fact index (many waits in flight, emitted in log order per partition), passes snapshot
markers through, and appends one work item per claiming target to `<prefix>.branch-work`, keyed by
provider + branch. Offsets are committed only after the work items were acknowledged.
"""

from pipeline.router.router import AuthorLookup, Router, RouterStats

__all__ = [
    "AuthorLookup",
    "Router",
    "RouterStats",
]
