"""The content key: an object version named by the digest of its sanitized canonical JSON.

An admission webhook sees a write before it is stored, so it never learns the resourceVersion the
write will get; what it does see is the object as it will be stored. Both the admission fact and
the watch event can therefore name the version by the digest of the same sanitized bytes, and the
router joins them on (uid, content key). The prefix keeps a content key from ever equalling a
resourceVersion (etcd revisions are decimal), so both can share the fact index's exact slots.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["CONTENT_KEY_PREFIX", "content_key", "is_content_key"]

CONTENT_KEY_PREFIX: Final = "content:"


def content_key(canonical: bytes) -> str:
    """The key of one version's sanitized canonical JSON (`pipeline.content.sanitize.sanitized_json`)."""
    return CONTENT_KEY_PREFIX + hashlib.sha256(canonical).hexdigest()


def is_content_key(value: str) -> bool:
    return value.startswith(CONTENT_KEY_PREFIX)
