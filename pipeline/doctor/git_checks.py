"""Doctor checks of each Git provider: credentials present, remote reachable with them, and every
branch a target writes pushable (a dry-run push of a throw-away commit onto the current tip).

The remote is driven through `pipeline.commit.git.repo.LocalRepo`, the same Git plumbing and
credential handling the commit worker uses, so a pass here means the worker's pushes authenticate.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from pipeline.commit.consumer import remote_auth
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.repo import GitRemoteError, LocalRepo, PushRejected, Signature
from pipeline.commit.identity import Identity
from pipeline.config import ProviderSettings, Settings
from pipeline.doctor.report import Check, Status
from pipeline.gitcredentials import ObjectReader
from pipeline.redaction import redact_url
from pipeline.service.objects import ClusterObjects

__all__ = ["check_providers"]

AREA = "git"
_EMPTY_TREE = b""


def _check(provider: ProviderSettings, check: str, status: Status, detail: str, fix: str = "") -> Check:
    """One row of this area about `provider`."""
    return Check(area=AREA, subject=provider.name, check=check, status=status, detail=detail, fix=fix)


def _branches(settings: Settings, provider: ProviderSettings) -> list[str]:
    mine = [t for t in settings.targets if t.provider == provider.name]
    return sorted({t.branch or provider.default_branch for t in mine})


def _credential_checks(provider: ProviderSettings) -> list[Check]:
    if provider.credentials_secret is not None:
        detail = f"from Secret {provider.credentials_secret.describe()} (read as the commit worker reads it; "
        return [_check(provider, "credentials", Status.INFO, detail + "the next checks use it)")]
    missing = [
        name for name in (provider.username_env, provider.password_env) if name and name not in os.environ
    ]
    if missing:
        names = ", ".join(missing)
        fix = f"set {names} in the service's environment (in the chart: `env` with a secretKeyRef)"
        return [
            _check(provider, "credentials", Status.FAIL, f"environment variable(s) not set: {names}", fix)
        ]
    if provider.password_env is None:
        detail = "none configured (anonymous or transport-level access)"
        return [_check(provider, "credentials", Status.INFO, detail)]
    return [_check(provider, "credentials", Status.OK, f"from {provider.password_env}")]


def _remote_fix(exc: GitRemoteError, provider: ProviderSettings) -> str:
    secret = provider.credentials_secret
    if exc.auth and secret is not None:
        return (
            f"fix Secret {secret.describe()} as the message says (its keys: docs/secrets.md, Git credentials "
            "from a Secret), grant the service account get on it, and check that the credentials grant "
            "read and write access to the repository"
        )
    if exc.auth:
        return (
            f"the remote refused the credentials from {provider.password_env or '(none)'}: check the token "
            "and that it grants read and write access to the repository"
        )
    return f"check providers[{provider.name}].url and that this host can reach it"


async def _push_check(repo: LocalRepo, provider: ProviderSettings, branch: str, tip: str | None) -> Check:
    committer = Identity(provider.committer.name, provider.committer.email)
    now_s = int(time.time())
    tree = repo.objects.write(b"tree", _EMPTY_TREE)
    stamp = Signature(committer, now_s)
    sha = repo.commit(tree, tip, stamp, stamp, "reverser doctor: dry-run push\n")
    repo.set_branch("reverser-doctor", sha)
    check = f"branch {branch} pushable"
    try:
        await repo.push(branch, sha, tip, dry_run=True)
    except PushRejected as exc:
        return _check(
            provider, check, Status.FAIL, str(exc), "the branch moved during the check; run doctor again"
        )
    except GitRemoteError as exc:
        fix = (
            f"the remote refuses pushes to {branch}: give the credentials write access and allow this "
            "identity to push to the branch (branch protection, push rules, receive-pack enabled)"
        )
        return _check(provider, check, Status.FAIL, str(exc), fix)
    state = "exists" if tip else "would be created"
    return _check(provider, check, Status.OK, f"dry run ok ({state})")


async def _one_provider(
    settings: Settings, provider: ProviderSettings, scratch: Path, reader: ObjectReader
) -> list[Check]:
    checks = _credential_checks(provider)
    if checks[0].status is Status.FAIL:
        return checks
    auth = remote_auth(provider)
    remote = None
    if provider.reads_cluster:  # credentials, known hosts, signing key: read as the worker reads them
        remote = SecretAccess(provider, scratch / "keys", reader, env_auth=auth)
    repo = LocalRepo(scratch / provider.name, provider.url, auth, access=remote)
    try:
        try:
            heads = await repo.remote_heads()
        except GitRemoteError as exc:
            checks.append(
                _check(provider, "remote reachable", Status.FAIL, str(exc), _remote_fix(exc, provider))
            )
            return checks
        reachable = f"{redact_url(provider.url)}: {len(heads)} branch(es)"
        checks.append(_check(provider, "remote reachable", Status.OK, reachable))
        for branch in _branches(settings, provider):
            checks.append(await _push_check(repo, provider, branch, heads.get(branch)))
        return checks
    finally:
        repo.close()


async def check_providers(settings: Settings, reader: ObjectReader | None = None) -> list[Check]:
    """Checks of every provider some target writes to (others get an INFO line).

    A provider's Secret is read through `reader`, by default the commit worker's own
    (`ClusterObjects`: `get` on the cluster the custom resources live in).
    """
    checks: list[Check] = []
    objects = ClusterObjects(settings)
    with tempfile.TemporaryDirectory(prefix="reverser-doctor-") as scratch:
        try:
            for provider in settings.providers:
                if not _branches(settings, provider):
                    checks.append(
                        _check(provider, "targets", Status.INFO, "no target writes to this provider")
                    )
                    continue
                checks += await _one_provider(settings, provider, Path(scratch), reader or objects.read)
        finally:
            await objects.close()
    return checks
