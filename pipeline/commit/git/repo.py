"""The worker's local bare repository and its remote: object writes, fetch and compare-and-swap push.

Network operations run the `git` CLI as asyncio subprocesses so a slow remote never blocks the
event loop. HTTP credentials (basic, or a bearer token) travel in an `http.<origin>.extraHeader`
passed through `GIT_CONFIG_*` environment variables, so they never appear in a URL, on a command
line, or on disk, and git attaches them only to requests for the remote's own scheme, host and
port. The URL (and any revision) is always given after `--end-of-options`, and `GIT_ALLOW_PROTOCOL`
limits git to the transports `pipeline.gitnames` accepts, so a URL can never become an option or a
command.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

import git

from pipeline.commit.commits import CommitInfo
from pipeline.commit.git.objstore import ObjectStore
from pipeline.commit.git.signing import CommitSigner, signed_commit
from pipeline.commit.git.sshremote import SshTransport
from pipeline.commit.git.tree import GitTree
from pipeline.commit.identity import Identity
from pipeline.gitnames import ALLOWED_SCHEMES, origin_of
from pipeline.redaction import redact_url

__all__ = [
    "CommitInfo",
    "GitRemoteError",
    "LocalRepo",
    "PushRejected",
    "RemoteAccess",
    "RemoteAuth",
    "Signature",
    "clone_dir",
    "identity_line",
]

#: `git -c` options that make pack-objects send stored objects without searching for deltas
_NO_DELTA_SEARCH = ("-c", "pack.window=0")

logger = logging.getLogger(__name__)

GC_EVERY_PACKS = 50
#: Git's suffix for a file being written before it is renamed into place (never read as a ref).
LOCK_SUFFIX = ".lock"
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _branch_moved(push_output: str) -> bool:
    """Whether a refused push lost a race with another push (fetch and replay, not back off).

    Either the remote's advertised tip already differed from the lease (`[rejected]`, `stale
    info`, `fetch first`), or the branch moved after the advertisement and before the remote
    locked it for the update: `[remote rejected] (failed to update ref)`, explained by
    `cannot lock ref '...': is at X but expected Y`. The window between the two grows with the
    remote's load, so the second form is frequent on a busy remote.
    """
    if any(hint in push_output for hint in ("[rejected]", "stale info", "fetch first")):
        return True
    return "cannot lock ref" in push_output and "but expected" in push_output


_FAILURE_HINTS = (
    "Authentication failed",
    "401",
    "403",
    "could not read Username",
    "terminal prompts disabled",
    "Permission denied (publickey",
)


def _refused(output: str) -> bool:
    """Whether git's output says the remote refused the credentials."""
    return any(hint in output for hint in _FAILURE_HINTS)


_HOST_KEY_HINTS = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED")


class GitRemoteError(Exception):
    """A fetch or push failed for a reason other than a moved remote (network, credentials, missing repo)."""

    def __init__(self, message: str, *, auth: bool = False) -> None:
        super().__init__(message)
        self.auth = auth


class PushRejected(Exception):
    """The remote branch is not where we expected it: somebody else pushed first."""


@dataclass(frozen=True, slots=True)
class RemoteAuth:
    """HTTP credentials for a remote: basic (user name and password) or a bearer token.

    Both travel the same way, as the `Authorization` header of `http.<origin>.extraHeader`
    (see the module docstring); the values are kept out of the repr.
    """

    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    bearer_token: str | None = field(default=None, repr=False)

    def header(self) -> str:
        if self.bearer_token is not None:
            return f"Authorization: Bearer {self.bearer_token}"
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Authorization: Basic {token}"


class RemoteAccess(Protocol):
    """Credentials that may change while a clone lives (a provider's Secret is rotated).

    Asked before every remote operation; told afterwards whether the remote took the credentials
    (`refused` False) or refused them (True), so refused ones are read again before the next try.
    `current` raises GitRemoteError (auth) when there are none to use yet.
    """

    async def current(self) -> tuple[RemoteAuth | None, SshTransport | None]: ...

    async def outcome(self, refused: bool) -> None: ...


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def identity_line(identity: Identity) -> str:
    """`Name <email>` as it is written into (and read back from) a commit header."""
    name = _CONTROL.sub(" ", identity.name.replace("<", "").replace(">", ""))
    email = _CONTROL.sub("", identity.email.replace("<", "").replace(">", ""))
    return f"{name} <{email}>"


def _drop_interrupted_writes(path: Path) -> None:
    """Remove what a killed process left half-written in a repository only this worker writes.

    Git (and `set_branch`) write a ref, `packed-refs` or the config under `<name>.lock` and rename
    it into place; a SIGKILL in between leaves the lock, and git then refuses to touch that file
    again. An empty or malformed `refs/heads/*.tmp` is the same leftover from the versions that
    wrote refs under that name, which git reads as a broken branch and answers every fetch with
    "bad object". No other process uses this repository, so nothing here is anybody's live lock.
    """
    refs = path / "refs"
    for leftover in [*path.glob(f"*{LOCK_SUFFIX}"), *refs.rglob(f"*{LOCK_SUFFIX}")]:
        leftover.unlink(missing_ok=True)
    for legacy in (refs / "heads").rglob("*.tmp"):
        if not _OBJECT_ID.fullmatch(legacy.read_text(encoding="ascii", errors="replace").strip()):
            legacy.unlink(missing_ok=True)


class Signature(NamedTuple):
    """Who made a commit and when (epoch seconds, UTC): its author or committer line."""

    identity: Identity
    time_s: int

    def header(self) -> bytes:
        return f"{identity_line(self.identity)} {self.time_s} +0000".encode()


def clone_dir(root: Path, provider: str, branch: str, url: str) -> Path:
    """Where the clone for one (provider, branch) lives under `root`: named by a hash, so any branch
    name is safe, and a changed URL gets a fresh clone."""
    digest = hashlib.sha256(f"{provider}\0{branch}\0{url.strip()}".encode()).hexdigest()[:32]
    return root / digest


class LocalRepo:
    """A bare repository owned by one branch worker: the object store and the remote-tracking refs."""

    def __init__(
        self,
        path: Path,
        url: str,
        auth: RemoteAuth | None = None,
        *,
        ssh: SshTransport | None = None,
        signer: CommitSigner | None = None,
        access: RemoteAccess | None = None,
    ) -> None:
        """`access` (credentials from a Secret) replaces `auth` and `ssh` before each remote operation."""
        self.path = path
        self.url = url
        self.auth = auth
        self.ssh = ssh
        self.signer = signer
        self.access = access
        if not (path / "HEAD").exists():
            path.mkdir(parents=True, exist_ok=True)
            git.Repo.init(path, bare=True)
        _drop_interrupted_writes(path)
        self.repo = git.Repo(path)
        with self.repo.config_writer() as config:
            config.set_value("commit", "gpgSign", "false")
            config.set_value("gc", "autoDetach", "false")
        self.objects = ObjectStore(path, self.repo.odb)
        self._packs_written = 0

    @classmethod
    def for_branch(
        cls, root: Path, provider: str, branch: str, url: str, auth: RemoteAuth | None
    ) -> LocalRepo:
        """The plain clone for one (provider, branch) under `root` (see `clone_dir`)."""
        return cls(clone_dir(root, provider, branch, url), url, auth)

    def close(self) -> None:
        self.repo.close()

    # objects -------------------------------------------------------------------------------
    def tree(self, commit_sha: str | None) -> GitTree:
        """An editable view of a commit's tree (an empty tree for None)."""
        root = self.read_commit(commit_sha).tree if commit_sha else None
        return GitTree(self.objects, root)

    def store_blob(self, data: bytes) -> bytes:
        return self.objects.write(b"blob", data)

    def commit(
        self, tree: bytes, parent: str | None, author: Signature, committer: Signature, message: str
    ) -> str:
        """Store a commit object and return its hex SHA (no ref moves)."""
        lines = [b"tree " + tree.hex().encode()]
        if parent:
            lines.append(b"parent " + parent.encode())
        lines.append(b"author " + author.header())
        lines.append(b"committer " + committer.header())
        body = signed_commit(b"\n".join(lines), message.encode("utf-8"), self.signer)
        return self.objects.write(b"commit", body).hex()

    def read_commit(self, sha: str) -> CommitInfo:
        raw = self.objects.read(bytes.fromhex(sha)).decode("utf-8", "replace")
        header, _, message = raw.partition("\n\n")
        tree = b""
        parents: list[str] = []
        author = committer = ""
        for line in header.splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                tree = bytes.fromhex(value)
            elif key == "parent":
                parents.append(value)
            elif key == "author":
                author = value.rsplit(" ", 2)[0]
            elif key == "committer":
                committer = value.rsplit(" ", 2)[0]
        return CommitInfo(sha, tree, tuple(parents), author, message, committer)

    def set_branch(self, branch: str, sha: str) -> None:
        """Write held objects, then point the local `refs/heads/<branch>` at `sha`.

        Every pack written is one more file to search, so every `GC_EVERY_PACKS` packs
        `git gc --auto` consolidates them once `gc.autoPackLimit` is exceeded.
        """
        if self.objects.flush():
            self._packs_written += 1
            if self._packs_written % GC_EVERY_PACKS == 0:
                subprocess.run(
                    ["git", "-C", str(self.path), "gc", "--auto", "--quiet"], check=False, capture_output=True
                )
        ref = self.path / "refs" / "heads" / branch
        ref.parent.mkdir(parents=True, exist_ok=True)
        # Written beside the ref under git's own lock name, which git never reads as a ref: a
        # process killed before the rename leaves a file git ignores (and the next open removes),
        # where any other name would be a broken ref that fails every later fetch.
        lock = ref.with_name(ref.name + LOCK_SUFFIX)
        lock.write_text(sha + "\n", encoding="ascii")
        os.replace(lock, ref)

    def remote_ref(self, branch: str) -> str | None:
        """The remote-tracking tip of `branch` as of the last fetch."""
        ref = self.path / "refs" / "remotes" / "origin" / branch
        try:
            return ref.read_text(encoding="ascii").strip() or None
        except FileNotFoundError:
            return self._packed_ref(f"refs/remotes/origin/{branch}")

    def _packed_ref(self, name: str) -> str | None:
        try:
            text = (self.path / "packed-refs").read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            sha, _, ref = line.partition(" ")
            if ref == name:
                return sha
        return None

    # remote --------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": "",
                "SSH_ASKPASS": "",
                "LC_ALL": "C",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_ALLOW_PROTOCOL": ":".join(sorted(ALLOWED_SCHEMES)),
            }
        )
        if self.ssh is not None:
            env["GIT_SSH_COMMAND"] = self.ssh.command()
            env["GIT_SSH_VARIANT"] = "ssh"
        origin = origin_of(self.url)
        if self.auth is not None and origin is not None and origin.scheme in ("http", "https"):
            env.update(
                {
                    "GIT_CONFIG_COUNT": "1",
                    "GIT_CONFIG_KEY_0": f"http.{origin.prefix()}.extraHeader",
                    "GIT_CONFIG_VALUE_0": self.auth.header(),
                }
            )
        return env

    async def _git(self, *args: str) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            str(self.path),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self._env(),
        )
        output, _ = await process.communicate()
        return process.returncode or 0, output.decode("utf-8", "replace").replace(
            self.url, redact_url(self.url)
        )

    async def _remote(self, *args: str) -> tuple[int, str]:
        """A git command that talks to the remote, with the credentials `access` gives right now."""
        if self.access is None:
            return await self._git(*args)
        self.auth, self.ssh = await self.access.current()
        code, output = await self._git(*args)
        refused = code != 0 and _refused(output)
        if code == 0 or refused:
            await self.access.outcome(refused)
        return code, output

    def _failure(self, action: str, output: str) -> GitRemoteError:
        auth = _refused(output)
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        fatal = [line for line in lines if line.startswith(("fatal:", "error:", "remote:"))]
        detail = "; ".join(fatal or lines[-1:]) or "no output"
        reason = "credentials rejected" if auth else "failed"
        if any(hint in output for hint in _HOST_KEY_HINTS):
            reason = "host key not trusted (add it to providers[].ssh.known_hosts_file)"
        return GitRemoteError(f"git {action} {redact_url(self.url)} {reason}: {detail}", auth=auth)

    async def last_commit_touching(self, rev: str, path: str) -> str | None:
        """The newest commit reachable from `rev` that changed `path` (None if none or unknown).

        Reads what is on disk (the remote tip and what was fetched or pushed), not unpushed commits.
        """
        code, output = await self._git("log", "-1", "--format=%H", "--end-of-options", rev, "--", path)
        sha = output.strip()
        return sha if code == 0 and len(sha) == 40 else None

    # notes ---------------------------------------------------------------------------------
    async def fetch_notes(self, ref: str) -> str | None:
        """Make the local notes `ref` what the remote has (None, and no local ref, when it has none)."""
        code, output = await self._remote("ls-remote", "--end-of-options", self.url, ref)
        if code != 0:
            raise self._failure("ls-remote", output)
        remote = next(
            (line.split("\t")[0] for line in output.splitlines() if line.endswith(f"\t{ref}")), None
        )
        if remote is None:
            await self._git("update-ref", "-d", ref)
            return None
        code, output = await self._remote(
            "fetch", "--no-tags", "--quiet", "--end-of-options", self.url, f"+{ref}:{ref}"
        )
        if code != 0:
            raise self._failure("fetch", output)
        return remote

    async def read_note(self, ref: str, sha: str) -> str:
        """The note `ref` holds for commit `sha` ("" when none)."""
        code, output = await self._git("notes", f"--ref={ref}", "show", sha)
        return output if code == 0 else ""

    async def write_note(self, ref: str, sha: str, text: str, identity: Identity) -> None:
        """Set the note of commit `sha` in `ref` (a commit on the notes ref by `identity`)."""
        code, output = await self._git(
            "-c",
            f"user.name={identity.name}",
            "-c",
            f"user.email={identity.email}",
            "notes",
            f"--ref={ref}",
            "add",
            "-f",
            "-m",
            text,
            sha,
        )
        if code != 0:
            raise GitRemoteError(f"git notes add {sha} failed: {output.strip()}")

    async def push_notes(self, ref: str, expected: str | None) -> None:
        """Push the local notes `ref` only if the remote's still points at `expected` (None: absent)."""
        code, output = await self._remote(
            "push",
            "--porcelain",
            f"--force-with-lease={ref}:{expected or ''}",
            "--end-of-options",
            self.url,
            f"{ref}:{ref}",
        )
        if code == 0:
            return
        if _branch_moved(output):
            raise PushRejected(f"{redact_url(self.url)} {ref} moved: {output.strip().splitlines()[-1]}")
        raise self._failure("push", output)

    async def remote_heads(self) -> dict[str, str]:
        """Branch name -> tip SHA as the remote advertises them (`git ls-remote`, nothing fetched)."""
        code, output = await self._remote("ls-remote", "--heads", "--end-of-options", self.url)
        if code != 0:
            raise self._failure("ls-remote", output)
        heads: dict[str, str] = {}
        for line in output.splitlines():
            sha, _, ref = line.partition("\t")
            if ref.startswith("refs/heads/"):
                heads[ref.removeprefix("refs/heads/")] = sha
        return heads

    async def fetch(self) -> None:
        """Bring every remote branch into `refs/remotes/origin/*` (pruning deleted ones)."""
        code, output = await self._remote(
            "fetch",
            "--no-tags",
            "--prune",
            "--quiet",
            "--end-of-options",
            self.url,
            "+refs/heads/*:refs/remotes/origin/*",
        )
        if code != 0:
            raise self._failure("fetch", output)

    async def push(
        self, branch: str, sha: str, expected: str | None, *, dry_run: bool = False, bulk: bool = False
    ) -> None:
        """Set the remote branch to `sha` only if it still points at `expected` (None: absent).

        `dry_run` goes through authentication and the remote's receive-pack ref advertisement
        without updating anything (`reverser doctor` uses it to prove the branch is pushable).
        `bulk` sends the new objects as they are stored, without git's search for deltas between
        them: for a snapshot part of thousands of new files that search was most of the push (0.8
        of 1.2 s for 5,000 files beside 45,000), while a change of a few files keeps it, because
        its new trees delta against the remote's.
        """
        ref = f"refs/heads/{branch}"
        code, output = await self._remote(
            *(_NO_DELTA_SEARCH if bulk else ()),
            "push",
            "--porcelain",
            *(["--dry-run"] if dry_run else []),
            f"--force-with-lease={ref}:{expected or ''}",
            "--end-of-options",
            self.url,
            f"{sha}:{ref}",
        )
        if code == 0:
            return
        if _branch_moved(output):
            raise PushRejected(f"{redact_url(self.url)} {branch} moved: {output.strip().splitlines()[-1]}")
        raise self._failure("push", output)
