"""The operations a change makes on Git: the one list the configuration and the records share.

A watch rule's `operations` names which of them reach Git, a `Write` record carries one, and a
commit message names it. The enum sits below the configuration so that `pipeline.config` can
type its field with it; `pipeline.codec.branch_work` re-exports it with the record.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Operation"]


class Operation(StrEnum):
    """The Git-side operation of a change; a deletion is recorded at intent time."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"

    @classmethod
    def of_verb(cls, verb: str) -> Operation:
        """The operation of a snapshot object from the verb of the fact that names it (no event type)."""
        return cls.CREATE if verb.lower() == "create" else cls.UPDATE
