"""Which replicas are alive, as Leases: one member Lease per replica, renewed while it runs.

Sharded watching (`pipeline.watch.shards`) deals a cluster's shards out over the live replicas, so
each replica must see the others, including those that hold no shard yet. Each replica keeps a
Lease of its own, labelled with the roster it belongs to, renews it every `renew_s` and lists the
roster's Leases. A member is live while this process sees its Lease change within the Lease's
duration, judged on this process's own clock as `LeaseElector` judges expiry, so clock skew between
replicas cannot matter. A replica that stops deletes its Lease; one that crashed drops out after a
duration, and its Lease is deleted by whoever sees it stale for `STALE_DURATIONS` durations.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from pipeline.kube.client import KubeError
from pipeline.kube.lease import LeaseTerms, micro_time

__all__ = ["ROSTER_LABEL", "STALE_DURATIONS", "Roster", "member_lease_name"]

logger = logging.getLogger(__name__)

#: The label that gathers a roster's member Leases; its value is a digest of the roster's name.
ROSTER_LABEL = "reverser.io/watch-roster"
#: A member Lease unchanged for this many durations is deleted by the first replica that sees it.
STALE_DURATIONS = 5.0


def _short_digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def member_lease_name(roster: str, identity: str) -> str:
    """A replica's member Lease: the roster's name and a digest of the replica's identity."""
    return f"{roster}-member-{_short_digest(identity)}"


class Roster:
    """Keeps this replica's member Lease and follows everybody's; `members()` is the live set."""

    def __init__(self, terms: LeaseTerms, name: str) -> None:
        self.terms = terms
        self.name = name
        self._own = member_lease_name(name, terms.identity)
        self._selector = f"{ROSTER_LABEL}={_short_digest(name)}"
        # member Lease name -> (holder, resourceVersion, when this process first saw that version)
        self._seen: dict[str, tuple[str, str, float]] = {}
        self._live: frozenset[str] = frozenset({terms.identity})
        self._listings = 0

    def members(self) -> frozenset[str]:
        """The identities of the live replicas, this one always included."""
        return self._live

    def listed(self) -> bool:
        """Whether the roster is known well enough to deal shards by: listed with another member
        in it, or listed twice.

        Replicas started together list the roster within moments of each other, and the first may
        list it before the others' member Leases exist. Dealing then, it would take every shard
        and hand them over a moment later, each new owner starting its snapshot again. Its second
        listing, a renew interval later, finds them; a replica that is alone waits that long once.
        """
        return self._listings >= 2 or (self._listings == 1 and len(self._live) > 1)

    async def run(self) -> None:
        """Renew this replica's Lease and list the roster every `renew_s`, until cancelled."""
        while True:
            before = self._live
            try:
                await self.round()
            except KubeError as exc:
                logger.warning("roster %s/%s: %s", self.terms.namespace, self.name, exc)
                self._live = self._compute_live()  # members expire without a listing too
            if self._live != before:
                logger.info(
                    "roster %s: %d live replica(s): %s", self.name, len(self._live), sorted(self._live)
                )
            await self.terms.sleep(self.terms.renew_s)

    async def round(self) -> None:
        """One renewal of this replica's Lease and one listing of the roster, which `members`
        then answers from."""
        await self._renew()
        listing = await self.terms.client.get_json(
            self.terms.collection, query=[("labelSelector", self._selector)]
        )
        now = self.terms.clock()
        present: set[str] = set()
        for lease in listing.get("items") or []:
            meta = lease.get("metadata") or {}
            name = str(meta.get("name") or "")
            holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
            record = str(meta.get("resourceVersion") or "")
            present.add(name)
            if self.terms.predecessor and holder == self.terms.predecessor:
                await self._delete_stale(name, record)
                continue
            seen = self._seen.get(name)
            if seen is None or seen[1] != record:
                self._seen[name] = (holder, record, now)
            elif name != self._own and now - seen[2] >= STALE_DURATIONS * self.terms.duration_s:
                await self._delete_stale(name, record)
        for gone in set(self._seen) - present:
            del self._seen[gone]
        self._listings += 1
        self._live = self._compute_live()

    def _compute_live(self) -> frozenset[str]:
        now = self.terms.clock()
        live = {
            holder
            for holder, _, seen_at in self._seen.values()
            if holder and now - seen_at < self.terms.duration_s
        }
        return frozenset(live | {self.terms.identity})

    def _body(self, existing: dict[str, Any] | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self._own,
            "labels": {ROSTER_LABEL: _short_digest(self.name)},
            "annotations": {"reverser.io/roster": self.name},
        }
        if existing is not None:
            meta["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.terms.identity,
                "leaseDurationSeconds": self.terms.duration_seconds,
                "renewTime": micro_time(self.terms.wall_clock()),
            },
        }

    async def _renew(self) -> None:
        path = f"{self.terms.collection}/{self._own}"
        try:
            existing = await self.terms.client.get_json(path)
        except KubeError as exc:
            if not exc.not_found:
                raise
            await self.terms.client.send_json("POST", self.terms.collection, self._body(None))
            return
        await self.terms.client.send_json("PUT", path, self._body(existing))

    async def _delete_stale(self, name: str, record: str) -> None:
        """Delete a crashed replica's Lease, only if it is still the version seen."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": record}}
        try:
            await self.terms.client.send_json("DELETE", f"{self.terms.collection}/{name}", body)
        except KubeError as exc:
            if exc.status not in (404, 409):
                logger.warning("roster %s: deleting the stale member %s failed: %s", self.name, name, exc)
            return
        logger.info("roster %s: deleted the member Lease %s of a stopped replica", self.name, name)

    async def release(self) -> None:
        """Delete this replica's Lease, so the others deal its shards out at once."""
        try:
            await self.terms.client.send_json("DELETE", f"{self.terms.collection}/{self._own}")
        except KubeError as exc:
            if not exc.not_found:
                logger.warning("roster %s: deleting this replica's member Lease failed: %s", self.name, exc)
