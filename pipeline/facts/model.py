"""The author fact, as carried in the `fact_batch` Avro record (see `schemas/fact_batch.avsc`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.models import GroupResource


@dataclass(slots=True)
class AuthorFact:
    """Who asked for one mutation of one object (or, for deletecollection, of a set of objects).

    Empty strings mean absent, mirroring the wire format. `uids is None` means "the response
    listed no uid set" (fall back to the scope), which is different from an empty set.
    """

    author: str
    display_name: str = ""
    email: str = ""
    verb: str = ""
    audit_id: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    resource_version: str = ""
    stage_timestamp_us: int = 0
    label_selector: str | None = None
    uids: list[str] | None = None

    def to_avro(self) -> dict[str, Any]:
        return {
            "author": self.author,
            "displayName": self.display_name,
            "email": self.email,
            "verb": self.verb,
            "auditID": self.audit_id,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "stageTimestampMicros": self.stage_timestamp_us,
            "labelSelector": self.label_selector,
            "uids": self.uids,
        }

    @classmethod
    def from_avro(cls, record: dict[str, Any]) -> AuthorFact:
        return cls(
            record["author"],
            record["displayName"],
            record["email"],
            record["verb"],
            record["auditID"],
            record["namespace"],
            record["name"],
            record["uid"],
            record["resourceVersion"],
            record["stageTimestampMicros"],
            record["labelSelector"],
            record["uids"],
        )


@dataclass(slots=True)
class FactBatch:
    """The facts of one request for one (route, group/resource) stream, in event order."""

    route: str
    group_resource: GroupResource
    facts: list[AuthorFact]

    def to_avro(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "group": self.group_resource.group,
            "resource": self.group_resource.resource,
            "facts": [fact.to_avro() for fact in self.facts],
        }

    @classmethod
    def from_avro(cls, record: dict[str, Any]) -> FactBatch:
        return cls(
            record["route"],
            GroupResource(record["group"], record["resource"]),
            [AuthorFact.from_avro(fact) for fact in record["facts"]],
        )
