"""`reverser run` wiring: the fact follower and the router, started together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pipeline.attribution import FactFollower, FactIndex, Resolver
from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames
from pipeline.models import Readiness
from pipeline.router.events import Destination
from pipeline.router.late import LateWatch
from pipeline.router.lookup import IndexLookup
from pipeline.router.router import Router


def target_path(path: str) -> str:
    """A target's folder as used in the repository: no leading/trailing slash, "" for the root."""
    cleaned = path.strip().strip("/")
    return "" if cleaned in ("", ".") else cleaned


def destinations(settings: Settings) -> dict[str, Destination]:
    """Target name → (provider, branch, folder); a target without a branch uses the provider's default."""
    return {
        target.name: Destination(
            target.provider,
            target.branch or settings.provider(target.provider).default_branch,
            target_path(target.path),
            settings.attribution_mode(target),
        )
        for target in settings.targets
    }


def index_lookup(settings: Settings, log: Log) -> tuple[FactFollower, IndexLookup]:
    """The router's attribution: a fact index the follower fills from audit-facts, and its resolver.

    `reverser replay watch-events` resolves through the same pair, so a replay names the authors
    the live router named, for as long as the facts are retained.
    """
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(log, topics, index, settings)
    resolver = Resolver(
        index,
        settings.attribution.grace_ms,
        settings.attribution.max_wait_ms,
        settings.attribution.reorder_ms,
    )
    return follower, IndexLookup(follower, resolver)


class RouterComponent:
    """The follower must have replayed the facts before the router resolves anything."""

    name = "router"

    def __init__(self, settings: Settings, log: Log) -> None:
        topics = TopicNames.for_prefix(settings.log.topic_prefix)
        self.follower, lookup = index_lookup(settings, log)
        # A late fact is looked for as long as facts live in the index: its TTL.
        late = LateWatch(log, topics.branch_work, lookup.late_author, float(settings.attribution.ttl_s))
        self.router = Router(
            log,
            topics,
            destinations(settings),
            lookup,
            group_id=f"{settings.log.topic_prefix}.router",
            late=late,
        )

    async def start(self) -> None:
        await self.follower.start()
        await self.router.start()

    def use_config_refresh(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self.router.refresh_config = refresh

    async def apply(self, settings: Settings) -> None:
        """Route to a changed configuration's targets from the next event on."""
        self.router.set_destinations(destinations(settings))

    async def stop(self) -> None:
        await self.router.stop()
        await self.follower.stop()

    def failure(self) -> str | None:
        return self.router.failure()

    def ready(self) -> bool:
        return self.follower.ready()

    def readiness(self) -> Readiness:
        """Not ready while the fact index replays, with its progress."""
        return self.follower.readiness()


def needed(settings: Settings) -> bool:
    """The router runs when targets are configured (every process also follows the facts), and
    always with custom resources, whose targets may come at any time."""
    return bool(settings.targets) or settings.custom_resources.enabled


def build(settings: Settings, log: Log) -> RouterComponent | None:
    """The router component when `needed`."""
    return RouterComponent(settings, log) if needed(settings) else None
