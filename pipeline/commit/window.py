"""The open commit window of one branch: writes of one author on one target, last write wins per path."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pipeline.codec.branch_work import CommitRequested, WorkAuthor
from pipeline.commit.inplace import LiveChange
from pipeline.commit.messages import ChangedObject
from pipeline.commit.position import Offset
from pipeline.config import ProviderSettings, TargetSettings

__all__ = ["CloseReason", "CommitWindow", "WindowKey", "event_time_ms", "window_limits_s"]

WindowKey = tuple[str, str, str]


def event_time_ms(author: WorkAuthor, observed_ms: int) -> int:
    """When a write was made: its audit fact's time when attribution found one, else when observed.

    Silence is measured in this time, so two changes made further apart than the window are not
    merged because a restart (or a lagging stage) delivered them together.
    """
    return author.event_time_ms or observed_ms


def window_limits_s(provider: ProviderSettings, target: TargetSettings | None) -> tuple[float, float]:
    """`(silence_s, max_age_s)` of a target's windows.

    The silence is the target's `commit_window_s`, else the provider's. The maximum age is the
    provider's `commit_window_max_s`, else the silence itself: by default a change is committed at
    most one window after the window's first write, however steadily writes keep coming.
    """
    silence_s = provider.commit_window_s
    if target is not None and target.commit_window_s is not None:
        silence_s = target.commit_window_s
    max_age_s = provider.commit_window_max_s if provider.commit_window_max_s is not None else silence_s
    return silence_s, max_age_s


class CloseReason(StrEnum):
    """Why a window closed (the `reason` label of `reverser_commit_window_closes_total`)."""

    SILENCE = "silence"
    MAX_AGE = "max_age"
    AUTHOR_CHANGE = "author_or_target_change"
    SIZE_CAP = "size_cap"
    WINDOW_ZERO = "window_zero"
    SNAPSHOT = "snapshot_end"
    SHUTDOWN = "shutdown"
    REVOKED = "revoked"
    TARGET_DELETED = "target_deleted"
    COMMIT_REQUEST = "commit_request"
    LATE_AUTHOR = "late_author"  # a late fact named an author of a write in the window: commit it to note it


@dataclass(slots=True)
class CommitWindow:
    """Writes collected for one (outcome, username, target); the first write's author names the commit."""

    key: WindowKey
    author: WorkAuthor
    target: str
    deadline: float
    silence_s: float
    # The longest the window stays open from its first write, in event time and on the clock.
    max_age_s: float
    opened_at: float = 0.0
    touched_at: float = 0.0
    writes: dict[str, tuple[bytes | None, ChangedObject]] = field(default_factory=dict)
    # per canonical path, the change as the in-place writer needs it (pipeline/commit/inplace.py)
    changes: dict[str, LiveChange] = field(default_factory=dict)
    tiers: list[str] = field(default_factory=list)
    offsets: list[Offset] = field(default_factory=list)
    size: int = 0
    first_observed_ms: int = 0
    last_observed_ms: int = 0
    first_event_ms: int = 0
    last_event_ms: int = 0
    # CommitRequests attached to this window (pipeline/commit/flush.py): the first one's message
    # names the commit, and the window closes at `close_at` on the clock (`close_at_ms` in event
    # time) if nothing closes it before.
    requests: list[CommitRequested] = field(default_factory=list)
    close_at: float | None = None
    close_at_ms: int = 0

    @staticmethod
    def key_of(author: WorkAuthor, target: str) -> WindowKey:
        return (author.outcome, author.username, target)

    def add(
        self,
        path: str,
        content: bytes | None,
        obj: ChangedObject,
        author: WorkAuthor,
        at: Offset,
        observed_ms: int,
        change: LiveChange | None = None,
    ) -> None:
        """Record one write; a repeated path keeps its first position but takes the newest content
        (and its change runs from the first change's object before to the newest object)."""
        previous = self.writes.get(path)
        if previous is not None and previous[0] is not None:
            self.size -= len(previous[0])
        self.writes[path] = (content, obj)
        earlier = self.changes.pop(path, None)
        if change is not None:
            self.changes[path] = earlier.then(change) if earlier is not None else change
        self.size += len(content) if content is not None else 0
        label = f"{author.tier} {author.username}".strip()
        if label not in self.tiers:
            self.tiers.append(label)
        self.offsets.append(at)
        if not self.first_observed_ms:
            self.first_observed_ms = observed_ms
        self.last_observed_ms = max(self.last_observed_ms, observed_ms)
        made_ms = event_time_ms(author, observed_ms)
        if not self.first_event_ms:
            self.first_event_ms = made_ms
        self.last_event_ms = max(self.last_event_ms, made_ms)

    def apart_from(self, event_ms: int) -> bool:
        """Whether a write made at `event_ms` is the silence or more away from the window's writes:
        after its last one, or before its first one. The latter happens when the write's watch
        stream was held up (an attribution hold, a failover replay) while another stream of the
        same branch delivered newer writes: it was made in a window of its own."""
        if not self.last_event_ms:
            return False
        silence_ms = self.silence_s * 1000
        return event_ms - self.last_event_ms >= silence_ms or self.first_event_ms - event_ms >= silence_ms

    def aged_before(self, event_ms: int) -> bool:
        """Whether a write made at `event_ms` comes `max_age_s` or more after the window's first write.

        Without this bound a steady stream of one person's writes (a controller, a script) would
        keep the window open, and every change in it unpublished, for as long as the stream lasts.
        """
        return bool(self.first_event_ms) and event_ms - self.first_event_ms >= self.max_age_s * 1000

    def touch(self, now: float) -> None:
        """Move the clock deadline after a write: the silence from now, never past the maximum age."""
        self.touched_at = now
        self.deadline = min(now + self.silence_s, self.opened_at + self.max_age_s)
        if self.close_at is not None:
            self.deadline = min(self.deadline, self.close_at)

    def request_due(self, event_ms: int) -> bool:
        """Whether a write made at `event_ms` comes after an attached request's close time: the
        request's window is committed first (so a replay closes it where the live run did)."""
        return bool(self.close_at_ms) and event_ms >= self.close_at_ms

    def clock_close_reason(self, now: float) -> CloseReason:
        """Why the window closes once its clock deadline passed: a request's delay, silence, or age."""
        if self.close_at is not None and now >= self.close_at:
            return CloseReason.COMMIT_REQUEST
        return CloseReason.SILENCE if now >= self.touched_at + self.silence_s else CloseReason.MAX_AGE
