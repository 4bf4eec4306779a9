"""Rotation picked up before the old credentials are revoked: a provider's Secret is read again every
`credentials_refresh_s`, so a rotated Secret is used from the next push after the refresh; a
re-read that fails keeps the credentials in use until the remote refuses them, and is reported.

The decisions run on a simulated clock (no sleeps, no remote: `current()` and `outcome()` are what
every remote operation calls); one test pushes to the real smart-HTTP remote (git http-backend)
while its password is rotated. The Secret comes from tests/commit/clusterobjects.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.codec.credentials_report import CredentialsReport
from pipeline.commit import metrics
from pipeline.commit.git.access import provider_access
from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.repo import GitRemoteError, RemoteAuth, Signature
from pipeline.commit.identity import Identity
from pipeline.config import ProviderSettings
from pipeline.gitcredentials import CredentialsReason
from tests.commit.clusterobjects import SECRET, Objects
from tests.commit.httpgit import basic_authorization, serving

OLD, NEW = "old-Pa55word", "new-Pa55word"
URL = "https://git.example.com/repo.git"  # never contacted by the clock tests


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider(refresh_s: float, url: str = URL) -> ProviderSettings:
    return ProviderSettings(
        name="rotating",
        url=url,
        credentials_secret={"namespace": "team-a", "name": "git-creds"},
        credentials_refresh_s=refresh_s,
        allow_plain_http_credentials=True,
    )


def secret(password: str) -> dict[str, bytes]:
    return {"username": b"git-user", "password": password.encode()}


def access_for(
    tmp_path: Path, refresh_s: float, objects: Objects, reports: list[CredentialsReport], clock: Clock
) -> SecretAccess:
    async def report(found: CredentialsReport) -> None:
        reports.append(found)

    return SecretAccess(provider(refresh_s), tmp_path / "keys", objects.read, report=report, clock=clock)


async def password(access: SecretAccess) -> str:
    auth = (await access.current())[0]
    assert isinstance(auth, RemoteAuth)
    return auth.password


def errors(reason: CredentialsReason) -> float:
    return float(metrics.CREDENTIALS_ERRORS.labels("rotating", reason)._value.get())


async def test_the_secret_is_read_again_once_the_refresh_interval_has_passed(tmp_path: Path) -> None:
    reports: list[CredentialsReport]
    objects, reports, clock = Objects(), [], Clock()
    objects.data[SECRET] = secret(OLD)
    access = access_for(tmp_path, 300, objects, reports, clock)
    assert await password(access) == OLD
    objects.data[SECRET] = secret(NEW)
    clock.now += 299.9
    assert await password(access) == OLD, "not yet: the values stay in memory"
    assert objects.reads == 1
    clock.now += 0.1
    assert await password(access) == NEW
    assert objects.reads == 2
    assert await password(access) == NEW
    assert objects.reads == 2, "the next refresh is one interval after this one"


async def test_refresh_zero_reads_again_only_after_a_refusal(tmp_path: Path) -> None:
    reports: list[CredentialsReport]
    objects, reports, clock = Objects(), [], Clock()
    objects.data[SECRET] = secret(OLD)
    access = access_for(tmp_path, 0, objects, reports, clock)
    assert await password(access) == OLD
    objects.data[SECRET] = secret(NEW)
    clock.now += 86_400
    assert await password(access) == OLD
    await access.outcome(refused=True)
    assert await password(access) == NEW
    assert objects.reads == 2


async def test_a_failed_refresh_keeps_the_credentials_in_use_and_reports_until_a_read_succeeds(
    tmp_path: Path,
) -> None:
    reports: list[CredentialsReport]
    objects, reports, clock = Objects(), [], Clock()
    objects.data[SECRET] = secret(OLD)
    access = access_for(tmp_path, 60, objects, reports, clock)
    assert await password(access) == OLD
    await access.outcome(refused=False)
    assert [r.ok for r in reports] == [True]

    # the ServiceAccount lost `get` on the Secret: the old password is still used, the failure shown
    objects.refused.add(SECRET)
    forbidden = errors(CredentialsReason.FORBIDDEN)
    clock.now += 60
    assert await password(access) == OLD
    assert errors(CredentialsReason.FORBIDDEN) == forbidden + 1
    failed = reports[-1]
    assert (failed.ok, failed.reason, failed.secret) == (False, "forbidden", "team-a/git-creds")
    assert "Secret team-a/git-creds: forbidden" in failed.message
    assert "the credentials read before stay in use until the remote refuses them" in failed.message
    assert OLD not in failed.message
    await access.outcome(refused=False)  # the remote still takes them: the failure stays reported
    assert reports[-1] is failed
    assert await password(access) == OLD
    assert errors(CredentialsReason.FORBIDDEN) == forbidden + 1, "tried again only after an interval"

    # access back and the Secret rotated: the next refresh reads it, the next push reports ok
    objects.refused.clear()
    objects.data[SECRET] = secret(NEW)
    clock.now += 60
    assert await password(access) == NEW
    await access.outcome(refused=False)
    assert reports[-1].ok


async def test_a_failed_refresh_then_a_refusal_leaves_no_credentials(tmp_path: Path) -> None:
    reports: list[CredentialsReport]
    objects, reports, clock = Objects(), [], Clock()
    objects.data[SECRET] = secret(OLD)
    access = access_for(tmp_path, 60, objects, reports, clock)
    await password(access)
    del objects.data[SECRET]
    clock.now += 60
    assert await password(access) == OLD
    assert (reports[-1].ok, reports[-1].reason) == (False, "not_found")
    await access.outcome(refused=True)  # the old password is revoked
    with pytest.raises(GitRemoteError, match="Secret team-a/git-creds does not exist") as caught:
        await access.current()
    assert caught.value.auth


async def test_a_rotation_reaches_the_real_remote_before_the_old_password_is_revoked(tmp_path: Path) -> None:
    """Smart HTTP: the remote takes both passwords during the rotation, then only the new one; the
    push after the refresh already sent the new one, so the revocation costs no refused push."""
    committer = Identity("Reverser", "reverser@example.com")
    with serving(tmp_path / "srv", ["repo.git"], "git-user", OLD) as server:
        _reports: list[CredentialsReport]
        objects, _reports, clock = Objects(), [], Clock()
        objects.data[SECRET] = secret(OLD)
        settings = provider(300, f"{server.base_url}/repo.git")
        remote = SecretAccess(settings, tmp_path / "keys", objects.read, clock=clock)
        access = provider_access(settings, None, tmp_path / "keys", remote)
        repo = access.clone(tmp_path / "clones", settings.name, "main", settings.url)

        async def push(n: int, parent: str | None) -> str:
            tree = repo.tree(parent)
            tree.put(f"f{n}.yaml", repo.store_blob(f"n: {n}\n".encode()))
            stamp = Signature(committer, n)
            sha = repo.commit(tree.write(), parent, stamp, stamp, f"change {n}\n")
            repo.set_branch("main", sha)
            await repo.push("main", sha, parent)
            return sha

        first = await push(1, None)
        old_header, new_header = basic_authorization("git-user", OLD), basic_authorization("git-user", NEW)
        # the rotation starts: the remote takes both, the Secret gets the new password
        server.also_accepted.add(new_header)
        objects.data[SECRET] = secret(NEW)
        second = await push(2, first)
        assert server.authorizations[-1] == old_header, "within the interval the old one is still used"
        clock.now += 300
        seen = len(server.authorizations)
        third = await push(3, second)
        assert set(server.authorizations[seen:]) == {new_header}, "the push after the refresh"
        # the old password is revoked: nothing is refused, the next push goes through
        server.expected, server.also_accepted = new_header, set()
        refused = len([r for r in server.requests if r[1] == 401])
        fourth = await push(4, third)
        assert len([r for r in server.requests if r[1] == 401]) == refused
        assert await repo.remote_heads() == {"main": fourth}
        assert objects.reads == 2
