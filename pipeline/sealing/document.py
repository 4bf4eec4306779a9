"""Reading a SOPS document without its keys: is it really encrypted, and what is its digest.

The commit worker never holds a decryption key. It accepts a sensitive object only as a SOPS
document whose `data`/`stringData` leaves are all ciphertext, and decides "unchanged" by the keyed
digest the watch stage stored in a plaintext annotation (SOPS output differs on every run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["DIGEST_ANNOTATION", "SealedDocument", "SealedDocumentError", "content_digest_of"]

DIGEST_ANNOTATION = "reverser.dev/content-hmac"
_KEY_GROUPS = ("age", "pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "key_groups")
_CIPHERTEXT = "ENC["
_SECRET_FIELDS = ("data", "stringData")


class SealedDocumentError(ValueError):
    """Content that must be a SOPS document is not one (or carries plaintext data)."""


def _leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [leaf for value in node.values() for leaf in _leaves(value)]
    if isinstance(node, list):
        return [leaf for value in node for leaf in _leaves(value)]
    return [node]


@dataclass(frozen=True, slots=True)
class SealedDocument:
    """A parsed SOPS YAML document: only what can be read without decrypting it."""

    digest: str | None

    @classmethod
    def parse(cls, content: bytes) -> SealedDocument:
        """Check `content` is a SOPS document with encrypted data; raises SealedDocumentError.

        The error message never quotes the content.
        """
        try:
            tree = yaml.safe_load(content)
        except yaml.YAMLError:
            raise SealedDocumentError("not YAML") from None
        if not isinstance(tree, dict):
            raise SealedDocumentError("not a YAML mapping")
        sops = tree.get("sops")
        if not isinstance(sops, dict) or not isinstance(sops.get("mac"), str):
            raise SealedDocumentError("no sops metadata (plaintext?)")
        if not any(sops.get(group) for group in _KEY_GROUPS):
            raise SealedDocumentError("sops metadata names no key")
        for field in _SECRET_FIELDS:
            for leaf in _leaves(tree.get(field)):
                if leaf is not None and not (isinstance(leaf, str) and leaf.startswith(_CIPHERTEXT)):
                    raise SealedDocumentError(f"{field} holds an unencrypted value")
        meta = tree.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        digest = annotations.get(DIGEST_ANNOTATION) if isinstance(annotations, dict) else None
        if not (isinstance(digest, str) and digest.startswith("hmac-sha256:")):
            digest = None
        return cls(digest)


def content_digest_of(content: bytes) -> str | None:
    """The keyed plaintext digest a sealed document carries, or None (not sealed by us, unreadable)."""
    try:
        return SealedDocument.parse(content).digest
    except SealedDocumentError:
        return None
