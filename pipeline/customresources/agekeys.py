"""gitops-reverser's SOPS key setup on a GitTarget, decided without I/O.

A GitTarget may keep its age keys in a Secret of its own namespace (`spec.encryption.secretRef`):
every `*.agekey` entry holds one age private key (the Flux convention, so the same Secret decrypts
in kustomize-controller), `age.recipients.extractFromSecret` encrypts to their public keys, and
`age.recipients.generateWhenMissing` lets the operator create one dated entry when there is none.

Why the controller resolves the keys and not the watch stage: only public keys need to travel. The
elected configuration controller reads the Secret, derives the recipients and publishes those (public
by nature) on the config topic like `publicKeys`; no private key is ever on the log, and one writer
(the Lease holder, with a create-only request) is what keeps two replicas from generating two keys.
This module is the pure part: which Secret a GitTarget names, what its data means, the Secret a
generation creates. `agekeyreader.py` does the reading and writing.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline.customresources.problems import FieldProblem

__all__ = [
    "AGE_KEY_SUFFIX",
    "BACKUP_WARNING_ANNOTATION",
    "BACKUP_WARNING_VALUE",
    "RECIPIENT_ANNOTATION",
    "SECRET_REF_FIELD",
    "AgeKeyError",
    "KeyResolution",
    "KeySource",
    "dated_key_name",
    "generated_secret",
    "key_source",
    "recipients_of",
]

#: A Secret entry whose name ends so holds one age private key (`AGE-SECRET-KEY-1...`).
AGE_KEY_SUFFIX = ".agekey"
#: Annotations gitops-reverser puts on a Secret it generated: the public key, and a reminder to
#: back the private key up (remove the annotation once done).
RECIPIENT_ANNOTATION = "configbutler.ai/age-recipient"
BACKUP_WARNING_ANNOTATION = "configbutler.ai/backup-warning"
BACKUP_WARNING_VALUE = "REMOVE_AFTER_BACKUP"
SECRET_REF_FIELD = "spec.encryption.secretRef"
_IDENTITY_PREFIX = "AGE-SECRET-KEY-"


class AgeKeyError(Exception):
    """A key Secret that yields no recipient; the message names the Secret and entry, never a value."""


@dataclass(frozen=True, slots=True, order=True)
class KeySource:
    """The age key Secret one GitTarget names, and whether it may be generated."""

    namespace: str
    name: str
    generate: bool = False

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class KeyResolution:
    """What the controller found in a key Secret: the recipients, or why there are none."""

    recipients: tuple[str, ...] = ()
    error: str = ""


def key_source(namespace: str, encryption: Mapping[str, Any]) -> tuple[KeySource | None, list[FieldProblem]]:
    """The Secret `spec.encryption` asks recipients from, with errors at the fields the user wrote.

    Only with `age.enabled` and `age.recipients.extractFromSecret` (gitops-reverser reads the Secret
    for nothing else); `generateWhenMissing` without `extractFromSecret` is refused as it refuses it.
    """
    age = encryption.get("age")
    if not isinstance(age, Mapping) or not age.get("enabled"):
        return None, []
    recipients = age.get("recipients") or {}
    if not isinstance(recipients, Mapping):
        return None, [FieldProblem("spec.encryption.age.recipients", "must be a mapping")]
    extract = recipients.get("extractFromSecret")
    generate = recipients.get("generateWhenMissing")
    problems = [
        FieldProblem(f"spec.encryption.age.recipients.{name}", "must be true or false")
        for name, value in (("extractFromSecret", extract), ("generateWhenMissing", generate))
        if value is not None and not isinstance(value, bool)
    ]
    if problems:
        return None, problems
    if generate and not extract:
        return None, [
            FieldProblem(
                "spec.encryption.age.recipients.generateWhenMissing",
                "needs extractFromSecret: true (the generated key is read back from "
                "spec.encryption.secretRef)",
            )
        ]
    if not extract:
        return None, []
    ref = encryption.get("secretRef") or {}
    if not isinstance(ref, Mapping):
        return None, [FieldProblem(SECRET_REF_FIELD, "must be a mapping")]
    kind = ref.get("kind")
    if kind not in (None, "", "Secret"):
        return None, [FieldProblem(f"{SECRET_REF_FIELD}.kind", f"must be Secret, not {kind!r}")]
    name = ref.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, [
            FieldProblem(
                f"{SECRET_REF_FIELD}.name",
                "names the Secret of *.agekey entries; it is required with age.recipients.extractFromSecret",
            )
        ]
    return KeySource(namespace, name.strip(), bool(generate)), []


def _identities(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def recipients_of(secret: str, data: Mapping[str, str]) -> tuple[str, ...]:
    """The sorted public keys of every `*.agekey` entry of a Secret's `data` (base64, as served).

    Each entry must hold exactly one age identity (comment lines allowed, as `age-keygen` writes);
    anything else raises AgeKeyError naming the Secret and the entry. No entry at all is an error
    too: a target must never be sealed to nobody.
    """
    import pyrage  # the `secrets` extra; imported here so `reverser config check` needs none

    found: set[str] = set()
    for entry in sorted(key for key in data if key.endswith(AGE_KEY_SUFFIX)):
        where = f"Secret {secret} key {entry}"
        try:
            text = base64.b64decode(data[entry] or "", validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, TypeError):
            raise AgeKeyError(f"{where} is not valid base64 UTF-8 text") from None
        identities = _identities(text)
        if len(identities) != 1 or not identities[0].startswith(_IDENTITY_PREFIX):
            raise AgeKeyError(f"{where} must hold exactly one {_IDENTITY_PREFIX}... age identity")
        try:
            identity = pyrage.x25519.Identity.from_str(identities[0])
        except Exception:  # pyrage raises its own unexported error types
            raise AgeKeyError(f"{where} does not hold a valid age identity") from None
        found.add(str(identity.to_public()))
    if not found:
        raise AgeKeyError(f"Secret {secret} has no *{AGE_KEY_SUFFIX} entry")
    return tuple(sorted(found))


def dated_key_name(now: datetime) -> str:
    """The entry a generation adds: the UTC date, `YYYYMMDD.agekey` (a later key sorts after it)."""
    return f"{now:%Y%m%d}{AGE_KEY_SUFFIX}"


def generated_secret(source: KeySource, now: datetime) -> tuple[dict[str, Any], str]:
    """A new Secret manifest holding one fresh age key, and its public key.

    The annotations are gitops-reverser's, so a user switching over finds the same reminder to
    back the key up.
    """
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    recipient = str(identity.to_public())
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": source.name,
            "namespace": source.namespace,
            "annotations": {
                RECIPIENT_ANNOTATION: recipient,
                BACKUP_WARNING_ANNOTATION: BACKUP_WARNING_VALUE,
            },
        },
        "type": "Opaque",
        "data": {dated_key_name(now): base64.b64encode(f"{identity}\n".encode()).decode("ascii")},
    }
    return manifest, recipient
