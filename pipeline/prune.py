"""The prune modes: what a target does with the files of objects that no longer exist.

The configuration types `targets[].prune` with `Prune`, the configuration controller writes it into
`TargetDeleted`, and the commit worker acts on it (docs/commit-worker.md, the prune matrix). The
enum is the one list of the modes; it sits below the configuration so both can use it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Prune"]


class Prune(StrEnum):
    """`Never` keeps every file, `OnEvent` removes a deleted object's file, `Always` also sweeps."""

    NEVER = "Never"
    ON_EVENT = "OnEvent"
    ALWAYS = "Always"
