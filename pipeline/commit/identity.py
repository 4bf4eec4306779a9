"""Commit identities: the resolved actor as the author, the configured identity as the committer.

Rendering (docs/commit-worker.md, "Identities") makes sure a commit never carries a name that
would break the `Name <email>` header, and an unresolved change is visibly unresolved rather than
blamed on the operator.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Final, NamedTuple

from pipeline.codec.branch_work import ActorKind, Outcome
from pipeline.config import CommitterSettings

#: The `committer` defaults (pipeline.config owns them), for a name or email left blank.
_COMMITTER: Final = CommitterSettings()

__all__ = [
    "COMMITTER_KIND",
    "UNRESOLVED",
    "UNRESOLVED_KIND",
    "AuthorKind",
    "Identity",
    "author_identity",
    "author_kind",
    "committer_identity",
    "safe_email",
]

_EMAIL = re.compile(r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$")
_NOT_LOCAL = re.compile(r"[^a-z0-9.-]")


class Identity(NamedTuple):
    """A Git identity (`name <email>`)."""

    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


class AuthorKind(StrEnum):
    """Who authored a commit, as the commits metric's `author_kind` label says: an actor's kind
    (`ActorKind`'s user or service account), `UNRESOLVED`, or the committer itself."""

    USER = ActorKind.USER.value
    SERVICE_ACCOUNT = ActorKind.SERVICE_ACCOUNT.value
    UNRESOLVED = "unresolved"
    COMMITTER = "committer"

    @classmethod
    def of_actor(cls, actor: ActorKind) -> AuthorKind:
        """The author kind of a named actor (`ActorKind.NONE` has none: it is unresolved)."""
        return cls.UNRESOLVED if actor is ActorKind.NONE else cls(actor.value)


#: The `author_kind` of commits the committer authors (snapshots, retired targets, no attribution).
COMMITTER_KIND: Final = AuthorKind.COMMITTER
#: The `author_kind` of commits authored by `UNRESOLVED`.
UNRESOLVED_KIND: Final = AuthorKind.UNRESOLVED

UNRESOLVED = Identity("unknown (attribution unresolved)", "attribution-unresolved@gitops-reverser.invalid")


def safe_email(username: str) -> str:
    """The username itself when it is an email, else a noreply address derived from it."""
    if _EMAIL.match(username):
        return username
    local = _NOT_LOCAL.sub("", username.lower()) or "unknown-user"
    return f"{local}@noreply.cluster.local"


def _clean_name(display_name: str) -> str | None:
    name = display_name.strip()
    if not name or "<" in name or ">" in name:
        return None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return None
    return name


def author_identity(
    outcome: Outcome, username: str, display_name: str, email: str, committer: Identity
) -> Identity:
    """The commit author for one window (outcome is the work item's RESOLVED/UNRESOLVED/NOT_ATTEMPTED)."""
    if outcome == Outcome.RESOLVED and username:
        name = _clean_name(display_name) or _clean_name(username) or "unknown-user"
        clean_email = email.strip()
        address = clean_email if _EMAIL.match(clean_email) else safe_email(username)
        return Identity(name, address)
    if outcome == Outcome.NOT_ATTEMPTED:
        return committer
    return UNRESOLVED


def author_kind(outcome: Outcome, username: str) -> AuthorKind:
    """`user`, `serviceaccount`, `unresolved` or `committer`: the label of the commits metric."""
    if outcome == Outcome.RESOLVED and username:
        return AuthorKind.of_actor(ActorKind.of(username))
    if outcome == Outcome.NOT_ATTEMPTED:
        return COMMITTER_KIND
    return UNRESOLVED_KIND


def committer_identity(name: str, email: str) -> Identity:
    """The configured committer, with the defaults for a blank name or email."""
    return Identity(name.strip() or _COMMITTER.name, email.strip() or _COMMITTER.email)
