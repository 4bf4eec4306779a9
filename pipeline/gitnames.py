"""What may reach `git` from configuration: branch names, remote URLs and repository paths.

These strings come from the operator's file, the environment or a command line and end up as
arguments of `git fetch`/`git push` or as paths in the tree the worker writes, so a bad one can
destroy data (a branch name git reads as an option, a remote URL that runs a command, a target
path that writes into `.git`). The checks live here, below `pipeline.config`, so the configuration,
the commit worker and the CLIs all apply the same rules.
"""

from __future__ import annotations

import posixpath
import re
from typing import NamedTuple
from urllib.parse import urlsplit

__all__ = [
    "ALLOWED_SCHEMES",
    "GitNameError",
    "Origin",
    "check_branch_name",
    "check_remote_url",
    "check_url_without_password",
    "is_git_dir",
    "normalize_target_path",
    "origin_of",
    "paths_overlap",
    "repository_key",
]

ALLOWED_SCHEMES = frozenset({"https", "http", "ssh", "file"})
_DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22}

_SCHEME_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_TRANSPORT = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Characters `git check-ref-format` refuses anywhere in a ref name (besides control characters).
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


class GitNameError(ValueError):
    """A branch name, remote URL or path that git must not be given; the message says why."""


def check_branch_name(name: str) -> str:
    """`name` if `git check-ref-format --branch` accepts it, else GitNameError.

    The rules of git-check-ref-format(1) applied to `refs/heads/<name>`, plus the two `--branch`
    adds: no leading `-` (git would read an option) and not `HEAD`.
    """
    if not name:
        raise GitNameError("branch name is empty")
    if name.startswith("-"):
        raise GitNameError(f"branch name {name!r} starts with '-'")
    if name == "HEAD":
        raise GitNameError("branch name 'HEAD' is reserved")
    if _REF_FORBIDDEN.search(name):
        raise GitNameError(f"branch name {name!r} contains a space, a control character or one of ~^:?*[\\")
    if ".." in name or "@{" in name:
        raise GitNameError(f"branch name {name!r} contains '..' or '@{{'")
    if name.endswith(".") or name.endswith("/") or name.startswith("/"):
        raise GitNameError(f"branch name {name!r} starts or ends with '/' or ends with '.'")
    for component in name.split("/"):
        if not component:
            raise GitNameError(f"branch name {name!r} has an empty path component")
        if component.startswith(".") or component.endswith(".lock"):
            raise GitNameError(
                f"branch name {name!r} has a component starting with '.' or ending with '.lock'"
            )
    return name


def check_remote_url(url: str) -> str:
    """`url` if git may fetch from and push to it, else GitNameError.

    Accepted: `https://`, `http://`, `ssh://` and `file://` URLs, scp-like `[user@]host:path`
    (SSH) and local paths. Refused: anything starting with `-` (git would read an option), control
    characters, other schemes (`git://` is unauthenticated and unencrypted, `ext::` runs a command)
    and `<transport>::<address>` remote-helper syntax.
    """
    if not url.strip():
        raise GitNameError("remote URL is empty")
    if url != url.strip():
        raise GitNameError("remote URL has leading or trailing whitespace")
    if url.startswith("-"):
        raise GitNameError("remote URL starts with '-' (git would read it as an option)")
    if _CONTROL.search(url):
        raise GitNameError("remote URL contains a control character")
    if _TRANSPORT.match(url):
        raise GitNameError("remote URL uses '<transport>::' remote-helper syntax, which is not allowed")
    scheme = _SCHEME_URL.match(url)
    if scheme is not None and scheme.group(1).lower() not in ALLOWED_SCHEMES:
        allowed = ", ".join(sorted(ALLOWED_SCHEMES))
        raise GitNameError(f"remote URL scheme {scheme.group(1)!r} is not allowed (use one of {allowed})")
    return url


def check_url_without_password(url: str) -> str:
    """`url` unless it carries a password (`scheme://user:password@host/...`), else GitNameError.

    Such a password would reach `git`'s argv (readable in /proc by every process of the pod), the
    config topic and every log line naming the remote. A user name alone (`ssh://git@host/`) is
    fine. The message never repeats the URL, since it holds the password.
    """
    if _SCHEME_URL.match(url) is None:
        return url
    netloc = urlsplit(url).netloc
    userinfo, at, _ = netloc.rpartition("@")
    if at and ":" in userinfo:
        raise GitNameError(
            "remote URL carries a password (scheme://user:password@host); give credentials through "
            "a Secret (credentials_secret, a GitProvider's spec.secretRef) or password_env instead"
        )
    return url


class Origin(NamedTuple):
    """Where credentials may go: a URL's scheme, host and port (the default port filled in)."""

    scheme: str
    host: str
    port: int | None

    def prefix(self) -> str:
        """`scheme://host[:port]/`, the form git's `http.<url>.*` configuration matches."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = _DEFAULT_PORTS.get(self.scheme)
        port = "" if self.port is None or self.port == default else f":{self.port}"
        return f"{self.scheme}://{host}{port}/"


def origin_of(url: str) -> Origin | None:
    """The origin of a `scheme://` URL; None for scp-like addresses and local paths."""
    if _SCHEME_URL.match(url) is None:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    return Origin(scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme))


def repository_key(url: str) -> str:
    """The repository a remote URL names, spelled one way, so two spellings of one repository compare
    equal: scheme and host lower-cased, the default port, a user name, a trailing `/` and `.git` left
    out (`https://Git.example.com:443/a/b.git/` and `https://git.example.com/a/b` are one)."""
    origin = origin_of(url)
    if origin is None:
        path = url
    else:
        path = urlsplit(url).path
        url = origin.prefix().rstrip("/")
    path = path.rstrip("/")
    path = path.removesuffix(".git").rstrip("/")
    return f"{url}{path}" if origin is not None else path


def is_git_dir(segment: str) -> bool:
    """A path segment git treats as its own directory on some file system (`.git` in any case)."""
    return segment.rstrip(". ").lower() == ".git"


def normalize_target_path(path: str) -> str:
    """A target's folder with `.`, leading/trailing slashes and empty segments removed; "" is the root.

    Absolute paths, backslashes, `..` and `.git` segments are refused so no write can escape the
    target's folder or land in a repository's metadata.
    """
    text = path.strip()
    if "\\" in text or text.startswith("/"):
        raise GitNameError(f"target path {path!r} must be relative and use '/'")
    if _CONTROL.search(text):
        raise GitNameError(f"target path {path!r} contains a control character")
    cleaned = posixpath.normpath(text) if text else "."
    if cleaned == ".":
        return ""
    if cleaned == ".." or cleaned.startswith("../") or "/../" in f"/{cleaned}/":
        raise GitNameError(f"target path {path!r} leaves the repository")
    cleaned = cleaned.strip("/")
    if any(is_git_dir(segment) for segment in cleaned.split("/")):
        raise GitNameError(f"target path {path!r} has a '.git' segment")
    return cleaned


def paths_overlap(first: str, second: str) -> bool:
    """Whether two normalized target paths are the same folder or one lies inside the other."""
    if not first or not second or first == second:
        return True
    return first.startswith(second + "/") or second.startswith(first + "/")
