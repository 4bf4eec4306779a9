"""`StreamId`: which watch stream a record is about, as one value.

A watch stream is one (target, cluster, group, version, resource, scope): the records that name a
stream (a cursor, a watch record's envelope, the watch stage's stream specs) carry it whole
instead of six loose strings. On the wire its fields stay flat in each record (the binding's
`Wire(spread=True)`), so no schema changed when it was introduced.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.models import GroupResource

__all__ = ["StreamId"]


@dataclass(frozen=True, slots=True)
class StreamId:
    """One watch stream: a target's rule, resolved to one resource in one scope of one cluster.

    `group` is "" for the core group; `scope` is the namespace watched, "" for every namespace (or
    a cluster-scoped resource).
    """

    target: str
    cluster: str
    group: str
    version: str
    resource: str
    scope: str

    @property
    def group_resource(self) -> GroupResource:
        return GroupResource(self.group, self.resource)

    @property
    def cursor_key(self) -> str:
        """The stream's key on the compacted cursor topic: target/group/resource/scope (neither the
        cluster nor the version is part of it)."""
        return f"{self.target}/{self.group}/{self.resource}/{self.scope}"
