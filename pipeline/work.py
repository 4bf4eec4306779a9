"""The author stored in every branch-work `Write`: the router resolves it, the commit worker commits under it.

Storing the author (instead of recomputing it) is what lets a replay of `<prefix>.branch-work`
rebuild the same history long after the audit facts have aged out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NOT_ATTEMPTED", "WorkAuthor"]


@dataclass(frozen=True, slots=True)
class WorkAuthor:
    """`outcome` is RESOLVED, UNRESOLVED or NOT_ATTEMPTED (no fact index configured).

    `event_time_ms` is when the change was made according to the matched audit fact (its stage
    time), 0 when no fact names it; commit windows measure silence in it (docs/commit-worker.md).
    """

    outcome: str
    username: str = ""
    display_name: str = ""
    email: str = ""
    tier: str = "absent"
    actor_kind: str = "none"
    event_time_ms: int = 0

    def to_avro(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "username": self.username,
            "displayName": self.display_name,
            "email": self.email,
            "tier": self.tier,
            "actorKind": self.actor_kind,
            "eventTimeMs": self.event_time_ms,
        }

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> WorkAuthor:
        return cls(
            data["outcome"],
            data["username"],
            data["displayName"],
            data["email"],
            data["tier"],
            data["actorKind"],
            data.get("eventTimeMs", 0),
        )


NOT_ATTEMPTED = WorkAuthor("NOT_ATTEMPTED", tier="none")
