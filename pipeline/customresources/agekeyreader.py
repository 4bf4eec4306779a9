"""Reading (and, once, creating) the age key Secrets GitTargets name, for the controller.

Only the Lease-holding configuration controller calls this, before each compile and every
`REFRESH_S`, so a key added to or rotated in the Secret reaches the published recipients without a
change to the GitTarget (gitops-reverser re-reads on its periodic reconcile too; neither watches
Secrets, which would keep every Secret value of the cluster in memory).

Generation is safe under several replicas: the Secret is created with a create-only POST, so if
another process (a former leader not yet fenced, a second install) created it first the answer is
409 AlreadyExists and the key read back is the other one; an existing Secret without a `*.agekey`
entry is updated with its resourceVersion, so a concurrent writer makes the update fail (409
Conflict) instead of being overwritten. Either way one key wins and everyone encrypts to it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from prometheus_client import Counter

from pipeline.customresources.agekeys import (
    AGE_KEY_SUFFIX,
    BACKUP_WARNING_ANNOTATION,
    RECIPIENT_ANNOTATION,
    AgeKeyError,
    KeyResolution,
    KeySource,
    generated_secret,
    recipients_of,
)
from pipeline.kube.client import KubeClient, KubeError

__all__ = ["AGE_KEYS_GENERATED", "AGE_KEY_ERRORS", "REFRESH_S", "AgeKeyReader", "KeyProblem"]

logger = logging.getLogger(__name__)

#: How often the controller reads the key Secrets again while nothing else changes.
REFRESH_S = 30.0
_ATTEMPTS = 3


class KeyProblem(StrEnum):
    """Why a key Secret gave no recipients (the `reason` label)."""

    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    UNREACHABLE = "unreachable"
    INVALID_KEY = "invalid_key"
    REFUSED = "refused"


AGE_KEY_ERRORS = Counter(
    "reverser_config_age_key_errors_total",
    "Reads of a GitTarget's age key Secret (spec.encryption.secretRef) that gave no recipients",
    ["reason"],
)
AGE_KEYS_GENERATED = Counter(
    "reverser_config_age_keys_generated_total",
    "age keys the configuration controller generated into a key Secret (generateWhenMissing)",
)


class _Unusable(Exception):
    def __init__(self, reason: KeyProblem, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AgeKeyReader:
    """Resolves key Secrets to recipients; keeps the last good answer through an outage."""

    def __init__(self, client: KubeClient, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._client = client
        self._clock = clock
        self._good: dict[KeySource, KeyResolution] = {}

    async def resolve(self, sources: Iterable[KeySource]) -> dict[KeySource, KeyResolution]:
        """Every source's recipients or its error (naming the Secret and entry, never a value)."""
        found: dict[KeySource, KeyResolution] = {}
        for source in sorted(set(sources)):
            try:
                resolution = KeyResolution(recipients=await self._recipients(source))
            except _Unusable as exc:
                AGE_KEY_ERRORS.labels(exc.reason).inc()
                kept = self._good.get(source)
                if exc.reason is KeyProblem.UNREACHABLE and kept is not None:
                    # the Secret is as it was as far as anyone knows: a blip must not stall the target
                    resolution = kept
                else:
                    resolution = KeyResolution(error=str(exc))
            found[source] = resolution
        self._good = {source: r for source, r in found.items() if r.recipients}
        return found

    async def _recipients(self, source: KeySource) -> tuple[str, ...]:
        for _ in range(_ATTEMPTS):
            secret = await self._read(source)
            if secret is None:
                await self._create(source)
                continue
            data = secret.get("data") or {}
            if source.generate and not any(key.endswith(AGE_KEY_SUFFIX) for key in data):
                await self._add_key(source, secret)
                continue
            try:
                return recipients_of(source.describe(), data)
            except AgeKeyError as exc:
                raise _Unusable(KeyProblem.INVALID_KEY, str(exc)) from None
        raise _Unusable(
            KeyProblem.REFUSED, f"Secret {source.describe()} kept changing while it was read; retrying"
        )

    async def _read(self, source: KeySource) -> dict[str, Any] | None:
        """The Secret, or None when it does not exist and may be generated."""
        try:
            return await self._client.get_json(_path(source))
        except KubeError as exc:
            if exc.not_found and source.generate:
                return None
            raise self._explained(source, exc, "get") from None

    async def _create(self, source: KeySource) -> None:
        manifest, recipient = generated_secret(source, self._clock())
        try:
            await self._client.send_json("POST", f"/api/v1/namespaces/{source.namespace}/secrets", manifest)
        except KubeError as exc:
            if exc.status == 409:  # another writer was first: read theirs
                return
            raise self._explained(source, exc, "create") from None
        self._generated(source, recipient)

    async def _add_key(self, source: KeySource, secret: dict[str, Any]) -> None:
        fresh, recipient = generated_secret(source, self._clock())
        updated = copy.deepcopy(secret)
        updated.setdefault("data", {}).update(fresh["data"])
        metadata = updated.setdefault("metadata", {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **fresh["metadata"]["annotations"]}
        try:
            # metadata.resourceVersion is kept: a concurrent change makes this a 409, never a lost key
            await self._client.send_json("PUT", _path(source), updated)
        except KubeError as exc:
            if exc.status == 409:
                return
            raise self._explained(source, exc, "update") from None
        self._generated(source, recipient)

    @staticmethod
    def _generated(source: KeySource, recipient: str) -> None:
        AGE_KEYS_GENERATED.inc()
        logger.warning(
            "generated an age key into Secret %s (public key %s): back the private key up, then remove "
            "its %s annotation; the recipient is also in its %s annotation",
            source.describe(),
            recipient,
            BACKUP_WARNING_ANNOTATION,
            RECIPIENT_ANNOTATION,
        )

    @staticmethod
    def _explained(source: KeySource, exc: KubeError, verb: str) -> _Unusable:
        secret = f"Secret {source.describe()}"
        if exc.not_found:
            return _Unusable(
                KeyProblem.NOT_FOUND,
                f"{secret} does not exist: create it with a *{AGE_KEY_SUFFIX} entry, or set "
                "spec.encryption.age.recipients.generateWhenMissing",
            )
        if exc.status == 403:
            return _Unusable(
                KeyProblem.FORBIDDEN,
                f"{secret}: {verb} is forbidden (the service account needs {verb} on secrets in namespace "
                f"{source.namespace})",
            )
        if exc.unreachable or exc.status >= 500:
            return _Unusable(
                KeyProblem.UNREACHABLE, f"{secret} could not be read: the apiserver did not answer"
            )
        return _Unusable(KeyProblem.REFUSED, f"{secret}: {verb} was refused ({exc.status} {exc.reason})")


def _path(source: KeySource) -> str:
    return f"/api/v1/namespaces/{source.namespace}/secrets/{source.name}"
