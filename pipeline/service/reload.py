"""Which settings a running process takes from a re-read file (SIGHUP), and which need a restart.

Live: `providers`, `targets` and `clusters`. They reach every stage through the same apply path
as a published custom-resource version (`Reconfigurable.apply`): the watch streams (clusters'
clients and leases included), the router's destinations, the commit worker's providers and
targets, and the audit ingress's watched types. Everything else (`log`, `metrics`, `audit`,
`attribution`, `lag`, `workdir`, `custom_resources`) is read once when the stages are built:
listeners are bound, the log is open, the fact index is sized. A change to those is named, logged
and counted, and the running value is kept, so the settings the process reports are the ones it
runs with, and the next reload names the same change again until a restart takes it.
"""

from __future__ import annotations

from typing import Any

from pipeline.config import Settings, revalidate

__all__ = ["LIVE_SETTINGS", "restart_only_changes", "take_live"]

#: The top-level settings a reload applies while running.
LIVE_SETTINGS = frozenset({"providers", "targets", "clusters"})


def _changed_paths(old: Any, new: Any, prefix: str) -> list[str]:
    """Dotted names of the leaves that differ (a mapping is descended, anything else compared)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new)):
            found += _changed_paths(old.get(key), new.get(key), f"{prefix}.{key}")
        return found
    return [] if old == new else [prefix]


def restart_only_changes(running: Settings, fresh: Settings) -> list[str]:
    """The settings that differ between `running` and `fresh` but only take effect on a restart,
    as dotted names (`audit.addr`, `log.backend`), sorted."""
    # python mode: secrets compare by value (the JSON dump masks them), and are never printed
    before = running.model_dump()
    after = fresh.model_dump()
    found: list[str] = []
    for name in sorted(set(before) | set(after)):
        if name not in LIVE_SETTINGS:
            found += _changed_paths(before.get(name), after.get(name), name)
    if running.custom_resources.enabled:
        # the config controller keeps the client it opened on the resources cluster
        current = running.resources_cluster
        changed = next((c for c in fresh.clusters if c.name == current.name), None)
        if changed != current:
            found.append(f"clusters.{current.name} (the custom-resources cluster)")
    return found


def take_live(running: Settings, fresh: Settings) -> Settings:
    """`running` with `fresh`'s live settings: what the process runs with after the reload.

    Checked as a whole, because the live settings refer to the rest (a target's cluster, the
    custom-resource cluster); raises ConfigError naming the field when they do not fit together.
    """
    merged = running.model_copy(update={name: getattr(fresh, name) for name in LIVE_SETTINGS})
    revalidate(merged, "the reloaded live settings with the running ones")
    return merged
