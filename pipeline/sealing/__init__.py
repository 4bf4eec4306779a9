"""SOPS + age sealing of sensitive objects (Secrets and what a target marks sensitive).

The watch stage seals a sensitive object before it reaches the log; the commit worker only checks
that what it writes is a SOPS document and compares documents by their keyed content digest.
See docs/secrets.md.
"""

from pipeline.sealing.document import SealedDocument, SealedDocumentError, content_digest_of
from pipeline.sealing.policy import SECRETS, is_sensitive, sensitive_set
from pipeline.sealing.sealer import DIGEST_ANNOTATION, Sealer, SealingError, sealer_for

__all__ = [
    "DIGEST_ANNOTATION",
    "SECRETS",
    "SealedDocument",
    "SealedDocumentError",
    "Sealer",
    "SealingError",
    "content_digest_of",
    "is_sensitive",
    "sealer_for",
    "sensitive_set",
]
