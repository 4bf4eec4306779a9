"""Never go backwards: the newest resourceVersion a branch worker has applied to each file.

Branch work normally arrives in resourceVersion order per object, but not always: a watch leader
that takes over resumes from a cursor that may lag the previous leader's last write, and a zombie
leader can append after its successor, so an object's older version can follow its newer one on
the log. Writing it would move the file backwards (and a later redelivery forwards again). The
ledger remembers, per path, the newest version applied (a delete included, so an old update cannot
resurrect a deleted object) and tells the worker to skip anything older.

resourceVersions are decimal etcd revisions on every built-in API and on CRDs served by the
apiserver; Kubernetes documents them as opaque, so two versions are compared only when both are
decimal integers, and anything else is treated as "not older" (written, as before).
"""

from __future__ import annotations

import uuid

from pipeline.models import compare_versions

__all__ = ["VersionLedger"]


class VersionLedger:
    """Newest applied resourceVersion per path, for one branch worker's lifetime."""

    def __init__(self) -> None:
        self._applied: dict[str, str] = {}
        # The uid of the object last written at each path (when known), to match deletion evidence:
        # a UUID in its 16 bytes (49 bytes held per object instead of 85), any other uid as given.
        self._uids: dict[str, bytes | str] = {}

    def __len__(self) -> int:
        return len(self._applied)

    def is_older(self, path: str, version: str) -> bool:
        """Whether `version` is older than what this worker already applied at `path`."""
        applied = self._applied.get(path)
        if applied is None:
            return False
        return compare_versions(version, applied) == -1

    def applied(self, path: str, version: str, uid: str = "") -> None:
        """Record that `version` is now the state at `path` (callers skip older versions first)."""
        if version and not self.is_older(path, version):
            self._applied[path] = version
            if uid:
                self._uids[path] = _compact_uid(uid)

    def knows(self, path: str) -> bool:
        """Whether this worker applied (or recalled from the branch's own work) any version at `path`."""
        return path in self._applied

    def uid_of(self, path: str) -> str:
        """The uid of the object last written at `path`; "" when not known."""
        held = self._uids.get(path, "")
        return str(uuid.UUID(bytes=held)) if isinstance(held, bytes) else held

    def newer_than(self, revision: str) -> set[str]:
        """Paths whose applied version is newer than `revision`.

        A snapshot listed at `revision` cannot know objects created after it, so its sweep must
        keep these.
        """
        return {p for p, v in self._applied.items() if compare_versions(v, revision) == 1}


def _compact_uid(uid: str) -> bytes | str:
    """`uid` as 16 bytes when it is a UUID in Kubernetes' own spelling (lower case, hyphens), so
    that it reads back exactly; else as given."""
    try:
        parsed = uuid.UUID(uid)
    except ValueError:
        return uid
    return parsed.bytes if str(parsed) == uid else uid
