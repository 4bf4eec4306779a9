"""The pipeline's topics and the configuration each one needs."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pipeline.config import Settings
from pipeline.log.api import TopicDescription, TopicSpec

AUDIT_FACTS = "audit-facts"
WATCH_EVENTS = "watch-events"
WATCH_CURSORS = "watch-cursors"
WATCH_CLAIMS = "watch-claims"
# Claims only matter while their writer runs; an hour covers any heartbeat interval.
WATCH_CLAIMS_RETENTION_MS = 3600 * 1000
BRANCH_WORK = "branch-work"
DEAD_LETTER = "dead-letter"
CONFIG = "config"
OBJECT_STATE = "object-state"
# The shortest history retention `reverser topics check` accepts: a commit worker that is down for
# longer than branch-work's retention loses work not yet in object-state, and a router down for
# longer than watch-events' retention loses changes not yet routed. A day covers a weekend-free
# outage with a margin; longer outages are recovered by a fresh snapshot (docs/log.md).
MIN_HISTORY_RETENTION_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicNames:
    """Full topic names for one `topic_prefix`."""

    audit_facts: str
    watch_events: str
    watch_cursors: str
    watch_claims: str
    branch_work: str
    dead_letter: str
    object_state: str
    config: str

    @classmethod
    def for_prefix(cls, prefix: str) -> TopicNames:
        return cls(
            audit_facts=f"{prefix}.{AUDIT_FACTS}",
            watch_events=f"{prefix}.{WATCH_EVENTS}",
            watch_cursors=f"{prefix}.{WATCH_CURSORS}",
            watch_claims=f"{prefix}.{WATCH_CLAIMS}",
            branch_work=f"{prefix}.{BRANCH_WORK}",
            dead_letter=f"{prefix}.{DEAD_LETTER}",
            object_state=f"{prefix}.{OBJECT_STATE}",
            config=f"{prefix}.{CONFIG}",
        )

    @property
    def replayable(self) -> frozenset[str]:
        """The topics whose records a stage dead-letters and reads again after a fix: watch events
        (the router) and branch work (the commit worker). `reverser dead-letter replay` writes to
        these only, whatever topic a letter names: a letter is data on a topic any writer of the
        log may append to, and one "from" the config topic would become a configuration version."""
        return frozenset({self.watch_events, self.branch_work})


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Every topic the pipeline uses, with the configuration the design requires.

    Audit facts age out after the fact TTL (append time is the fact's age, so LogAppendTime);
    watch events and branch work keep a bounded history (replays of recent changes, outages up to
    the retention); the current state of every object lives on the compacted object-state topic,
    so nothing needs history older than that; cursors are compacted (only the newest cursor per
    stream matters); watch claims are short-lived heartbeats. Replication left unset
    is chosen by the log from the cluster's size when the topic is created.
    """
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    topics = settings.log.topics
    ttl_ms = int(settings.attribution.ttl_s * 1000)
    max_bytes = topics.max_message_bytes
    spec = functools.partial(
        TopicSpec,
        replication_factor=topics.replication_factor,
        min_insync_replicas=topics.min_insync_replicas,
    )
    specs = [
        spec(
            names.audit_facts,
            topics.audit_facts_partitions,
            "delete",
            retention_ms=ttl_ms,
            retention_bytes=None,
            segment_ms=max(ttl_ms // 5, 60_000),
            max_message_bytes=max_bytes,
        ),
        spec(
            names.watch_events,
            topics.watch_events_partitions,
            "delete",
            retention_ms=topics.watch_events_retention_ms,
            max_message_bytes=max_bytes,
        ),
        spec(
            names.watch_cursors,
            topics.watch_cursors_partitions,
            "compact",
            max_message_bytes=max_bytes,
        ),
        # one partition: claims of every cluster in one order, so "written after" is an offset test
        spec(
            names.watch_claims,
            1,
            "delete",
            retention_ms=WATCH_CLAIMS_RETENTION_MS,
            max_message_bytes=max_bytes,
        ),
        spec(
            names.branch_work,
            topics.branch_work_partitions,
            "delete",
            retention_ms=topics.branch_work_retention_ms,
            max_message_bytes=max_bytes,
        ),
        spec(
            names.object_state,
            topics.object_state_partitions,
            "compact",
            max_message_bytes=max_bytes,
        ),
        spec(
            names.dead_letter,
            1,
            "delete",
            retention_ms=30 * 24 * 3600 * 1000,
            max_message_bytes=max_bytes,
        ),
    ]
    if settings.custom_resources.enabled:
        # the effective configuration from custom resources: one key, the newest version matters
        specs.append(spec(names.config, 1, "compact", max_message_bytes=max_bytes))
    return specs


@dataclass(frozen=True, slots=True)
class StateRisk:
    """A topic configuration under which a cold consumer or a long outage can lose state."""

    topic: str
    setting: str
    expected: str
    actual: str


def state_risks(names: TopicNames, described: dict[str, TopicDescription]) -> list[StateRisk]:
    """What `reverser topics check` flags beyond drift, judged on the topics as they are.

    Bounded history is only safe while `object-state` keeps the newest record of every key (so it
    must be compacted and nothing else) and the history topics keep at least
    `MIN_HISTORY_RETENTION_MS` (the outage a stage may have before unprocessed work ages out).
    These hold even when the configuration itself asks for less, which drift cannot see.
    """
    risks: list[StateRisk] = []
    state = described.get(names.object_state)
    if state is not None and state.configs.get("cleanup.policy") != "compact":
        risks.append(
            StateRisk(
                names.object_state,
                "cleanup.policy",
                "compact",
                state.configs.get("cleanup.policy", "(unset)"),
            )
        )
    for topic in (names.watch_events, names.branch_work):
        found = described.get(topic)
        if found is None:
            continue
        retention = found.configs.get("retention.ms")
        if retention is not None and retention != "-1" and int(retention) < MIN_HISTORY_RETENTION_MS:
            risks.append(StateRisk(topic, "retention.ms", f">= {MIN_HISTORY_RETENTION_MS}", retention))
    return risks
