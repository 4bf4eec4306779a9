"""Credentials taken out of text before it reaches a log, an error message or a metric.

One owner for the rule, so the Git stages' messages and the JSON log lines redact alike. It imports
nothing heavy: the command line's log formatter uses it before any stage is loaded.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_text", "redact_url"]

#: A URL with a user part (`scheme://user[:password]@`), as it may stand inside free text.
_URL_WITH_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@'\"]+@[^\s'\"]*")


def redact_url(url: str) -> str:
    """The URL without any user or password, fit for logs and error messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def redact_text(text: str) -> str:
    """`text` with every URL's user and password taken out (`redact_url`)."""
    return _URL_WITH_USER.sub(lambda match: redact_url(match[0]), text)
