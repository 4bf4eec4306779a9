"""The `attribution` section: the fact index and the join (docs/attribution.md)."""

from __future__ import annotations

from pydantic import Field, model_validator

from pipeline.config.section import Section


class AttributionSettings(Section):
    """The fact index and the join (see docs/attribution.md)."""

    ttl_s: float = Field(default=600.0, gt=0)
    """A fact is dead once its append time is older than now - ttl (seconds); also the replay horizon."""
    grace_ms: int = Field(default=3000, ge=0)
    """How long a resolution waits for a better fact, in ms (0: one lookup)."""
    max_wait_ms: int = Field(default=15000, ge=0)
    """How long a resolution may be held while the route's audit watermark is behind the event, in ms."""
    reorder_ms: int = Field(default=5000, ge=0)
    """How far audit time must pass an event before its resolution stops waiting, in ms: audit
    batches overtake each other across replicas by up to this much."""
    max_facts_per_type: int = Field(default=4096, gt=0)
    """Index entries per (route, group/resource)."""
    max_facts: int = Field(default=65536, gt=0)
    """Index entries in all (at least max_facts_per_type)."""
    collection_window_s: float = Field(default=30.0, gt=0)
    """How long a body-less deletecollection may match by label selector, in seconds."""
    sweep_interval_s: float = Field(default=30.0, gt=0)
    """How often expired facts are dropped from memory, in seconds."""

    @model_validator(mode="after")
    def _caps(self) -> AttributionSettings:
        if self.max_facts < self.max_facts_per_type:
            raise ValueError("max_facts must be >= max_facts_per_type")
        return self
