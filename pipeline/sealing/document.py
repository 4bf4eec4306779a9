"""Reading a SOPS document without its keys: is it really encrypted, and what is its digest.

The commit worker never holds a decryption key. It accepts a sensitive object only as a SOPS
document in which nothing but the readable fields of `pipeline.sealing.readable` is plaintext, and
decides "unchanged" by the keyed digest the watch stage stored in a readable annotation (SOPS
output differs on every run).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from pipeline.sealing.readable import DIGEST_ANNOTATION, READABLE_ANNOTATIONS, plaintext_fields

__all__ = ["PlaintextFieldError", "SealedDocument", "SealedDocumentError", "content_digest_of"]

_KEY_GROUPS = ("age", "pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "key_groups")


class SealedDocumentError(ValueError):
    """Content that must be a SOPS document is not one (or carries plaintext it must not)."""


class PlaintextFieldError(SealedDocumentError):
    """A SOPS document with a plaintext field outside the readable ones (a leak the worker refuses)."""


@dataclass(frozen=True, slots=True)
class SealedDocument:
    """A parsed SOPS YAML document: only what can be read without decrypting it."""

    digest: str | None

    @classmethod
    def parse(cls, content: bytes) -> SealedDocument:
        """Check `content` is a SOPS document with nothing unexpected in plaintext.

        Raises PlaintextFieldError naming the first such field by its path (e.g.
        `metadata.annotations["kapp.k14s.io/original"]`), and SealedDocumentError for content that
        is no SOPS document at all. The error message never quotes a value.
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
        leaks = plaintext_fields(tree)
        if leaks:
            more = f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""
            raise PlaintextFieldError(f"plaintext outside the readable fields: {leaks[0]}{more}")
        meta = tree.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        digest = annotations.get(DIGEST_ANNOTATION) if isinstance(annotations, dict) else None
        if not (isinstance(digest, str) and READABLE_ANNOTATIONS[DIGEST_ANNOTATION].fullmatch(digest)):
            digest = None
        return cls(digest)


def content_digest_of(content: bytes) -> str | None:
    """The keyed plaintext digest a sealed document carries, or None (not sealed by us, unreadable).

    A document with plaintext outside the readable fields has none either, so one written before
    that rule (a Secret with kapp's annotation in plaintext) counts as changed and is replaced.
    """
    try:
        return SealedDocument.parse(content).digest
    except SealedDocumentError:
        return None
