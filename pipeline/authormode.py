"""Who authors a target's commits: the person an audit fact names, or the configured identity.

Managed clusters (EKS, GKE, AKS) cannot post audit events to a webhook, so a target mirroring one
can never be attributed: with attribution on, every change would be held for the full
`attribution.max_wait_ms` and then committed as `unknown (attribution unresolved)`. In
`configured-author` mode the router does not ask the fact index at all: every change is committed
at once with the provider's committer as its author (gitops-reverser's default mode, its
`--author-attribution=false` / Helm `attribution.enabled: false`).

This module owns the mode's spelling and its default (a cluster's setting, overridden per target);
it sits below `pipeline.config` so the configuration, the router, the custom-resource compiler and
`reverser doctor` share one rule.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = ["DEFAULT_ATTRIBUTION_MODE", "AttributionMode", "effective_mode", "mode_of_enabled"]


class AttributionMode(StrEnum):
    """How the author of a target's commits is found (the `mode` label of the metrics)."""

    AUDIT = "audit"
    """Join each change with the audit facts; unresolved after the grace and hold (docs/attribution.md)."""
    CONFIGURED_AUTHOR = "configured-author"
    """No join, no wait: the provider's committer authors every commit."""


DEFAULT_ATTRIBUTION_MODE: Final = AttributionMode.AUDIT
"""A cluster's mode when its configuration names none: attribution on, as before the mode existed."""


def effective_mode(target_mode: AttributionMode | None, cluster_mode: AttributionMode) -> AttributionMode:
    """A target's own mode if it sets one, else its cluster's."""
    return cluster_mode if target_mode is None else target_mode


def mode_of_enabled(enabled: bool) -> AttributionMode:
    """gitops-reverser's spelling, `attribution.enabled` (a boolean), as a mode."""
    return AttributionMode.AUDIT if enabled else AttributionMode.CONFIGURED_AUTHOR
