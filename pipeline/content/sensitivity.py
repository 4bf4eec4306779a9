"""Which resources are sensitive: the one owner of that rule for every stage and fact source.

Secrets always are; a target with encryption may add more `resource` or `group/resource` entries.
A sensitive object's content reaches the log and Git only as a SOPS document (pipeline.sealing),
and no digest of it is ever put on the log (the admission fact source gives it no content key). It
lives with content, at the bottom of the layers, because both of those read it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.models import GroupResource

__all__ = ["SECRETS", "is_sensitive", "sensitive_set"]

SECRETS = GroupResource("", "secrets")


def sensitive_set(extra: Iterable[str] = ()) -> frozenset[GroupResource]:
    """Secrets plus the extra entries (case-insensitive, version ignored)."""
    return frozenset({SECRETS, *(GroupResource.parse(e.strip().lower()) for e in extra)})


def is_sensitive(group: str, resource: str, extra: frozenset[GroupResource] = frozenset()) -> bool:
    """Whether content of `group/resource` may only be written encrypted."""
    key = GroupResource(group, resource.lower())
    return key == SECRETS or key in extra
