"""SOPS + age sealing of sensitive objects (Secrets and what a target marks sensitive).

The watch stage seals a sensitive object before it reaches the log; the commit worker only checks
that what it writes is a SOPS document with nothing plaintext but the readable fields
(`readable.py` owns which those are) and compares documents by their keyed content digest.
See docs/secrets.md.
"""

from pipeline.content.sensitivity import SECRETS, is_sensitive, sensitive_set
from pipeline.sealing.document import (
    PlaintextFieldError,
    SealedDocument,
    SealedDocumentError,
    content_digest_of,
)
from pipeline.sealing.readable import DIGEST_ANNOTATION, READABLE_ANNOTATIONS
from pipeline.sealing.sealer import Sealer, SealingError, sealer_for

__all__ = [
    "DIGEST_ANNOTATION",
    "READABLE_ANNOTATIONS",
    "SECRETS",
    "PlaintextFieldError",
    "SealedDocument",
    "SealedDocumentError",
    "Sealer",
    "SealingError",
    "content_digest_of",
    "is_sensitive",
    "sealer_for",
    "sensitive_set",
]
