"""What the previous run of this replica left held, so that a restart after a crash takes it back at once.

A replica that is SIGKILLed (an OOM kill, a kubelet restarting the container, a crash) leaves its
Kafka group memberships and its watch Lease held until they time out: the broker waits
`log.session_timeout_ms` (30 s by default) before it hands the member's partitions to anyone, and
the other replicas wait `lease_duration_s` before they take the Lease. Measured with `make bench`
(bench/bench_e2e.py), the changes of the killed replica's branches reached Git 6.9x later than
the steady p50, almost all of it that wait. Only one process knows that the holder is dead
without waiting: the restarted one, since the holder was itself.

So each run records, in its workdir, the member id it got in each group and the Lease identity it
used, while it holds an exclusive lock on the workdir. The next run on the same workdir takes the
lock, which the kernel released when the recorded run exited, so the record names only dead
holders. It then hands them back: a LeaveGroup for each recorded member id, and the Lease taken
over as though it had been released. A second live process on the same workdir does not get the
lock and leaves everything to the timeouts. Correctness never depends on this: a member expelled by
mistake rejoins, and a stale leader is fenced as on any takeover (docs/operations.md, "Restarts").
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Final

__all__ = ["LOCK_FILE", "RECORD_FILE", "Incarnation"]

logger = logging.getLogger(__name__)

LOCK_FILE: Final = "replica.lock"
RECORD_FILE: Final = "replica.json"


class Incarnation:
    """This run's record of what it holds, and what the previous run on the workdir held."""

    def __init__(self, directory: Path, lock_fd: int, members: dict[str, str], lease_identity: str) -> None:
        self._directory = directory
        self._lock_fd: int | None = lock_fd
        self._previous_members = members
        self._previous_lease = lease_identity
        self._members: dict[str, str] = {}
        self._lease_identity = ""
        self._write()

    @classmethod
    def claim(cls, workdir: Path) -> Incarnation | None:
        """Lock `workdir` for this run and read its predecessor's record; None if a live process
        holds the lock (its memberships are not this run's to hand back)."""
        workdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(workdir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            logger.warning(
                "another process holds %s: a crashed run's group memberships and Lease are left to time out",
                workdir / LOCK_FILE,
            )
            return None
        members, lease = _read(workdir / RECORD_FILE)
        return cls(workdir, fd, members, lease)

    def take_predecessor_members(self) -> dict[str, str]:
        """Group id to the member id the previous run had in it, handed out once."""
        members, self._previous_members = self._previous_members, {}
        return members

    @property
    def predecessor_lease_identity(self) -> str:
        """The identity the previous run held Leases under ("" when none was recorded)."""
        return self._previous_lease

    def joined(self, group_id: str, member_id: str) -> None:
        """Record this run's member id in `group_id` (written only when it changed)."""
        if member_id and self._members.get(group_id) != member_id:
            self._members[group_id] = member_id
            self._write()

    def left(self, group_id: str) -> None:
        """This run left `group_id` itself: nothing to hand back after a crash."""
        if self._members.pop(group_id, None) is not None:
            self._write()

    def holds_leases_as(self, identity: str) -> None:
        """Record the identity this run's Lease electors use."""
        if identity != self._lease_identity:
            self._lease_identity = identity
            self._write()

    def close(self) -> None:
        """Release the workdir (a clean stop has left its groups and released its Leases)."""
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _write(self) -> None:
        """Replace the record atomically: a crash mid-write leaves the old record or the new one."""
        path = self._directory / RECORD_FILE
        partial = path.with_suffix(".json.partial")
        document = {"members": self._members, "lease_identity": self._lease_identity}
        try:
            partial.write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
            os.replace(partial, path)
        except OSError as exc:  # a full or read-only disk costs only the fast takeover
            logger.warning("cannot record this run's group memberships in %s: %s", path, exc)


def _read(path: Path) -> tuple[dict[str, str], str]:
    """The recorded member ids and Lease identity; nothing for a missing or unreadable record."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, ""
    except (OSError, ValueError) as exc:
        logger.warning("ignoring the previous run's record %s: %s", path, exc)
        return {}, ""
    if not isinstance(document, dict):
        logger.warning("ignoring the previous run's record %s: not a JSON object", path)
        return {}, ""
    members, lease = document.get("members"), document.get("lease_identity")
    if not isinstance(members, dict):
        members = {}
    return (
        {group: member for group, member in members.items() if isinstance(member, str) and member},
        lease if isinstance(lease, str) else "",
    )
