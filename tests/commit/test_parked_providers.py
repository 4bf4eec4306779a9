"""A provider whose access cannot be built is parked: its work waits, every other provider goes on.

Once a provider whose `signing.key_env` names an unset variable (or whose signing key is broken)
stopped the live apply part-way, and every later start of the process exited 2. Real commit
workers on the real log (both backends), real bare Git remotes, real ssh-keygen keys: the parked
provider's branches commit nothing while the good provider's do; a configuration that fixes it
lets its waiting work go on, in log order and signed; one that removes it dead-letters that work;
with custom resources the worker says why on the config topic, which the GitProvider's `Ready`
condition shows, naming the variable or file and never a value. The service starts from a
published configuration that has such a provider.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.commit import component as commit_component
from pipeline.commit.consumer import CommitWorker
from pipeline.commit.git.access import AccessError, provider_access
from pipeline.config import (
    ClusterSettings,
    MetricsSettings,
    ProviderSettings,
    Settings,
    SigningSettings,
    TargetSettings,
)
from pipeline.customresources.compile import ObjectReport
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.objects import Kind, ObjectRef
from pipeline.customresources.status import object_status
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.service.app import Service
from tests.commit.helpers import Work, bare_remote, cm, files, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.commit.test_config_catch_up import Published
from tests.commit.test_ssh_and_signing import stop_gpg_agent
from tests.deadletter.test_dead_letters import dead_lettered
from tests.support.gitsign import COMMITTER, keygen, verify_all
from tests.support.net import free_port
from tests.support.wait import wait_for

KEY_ENV = "REVERSER_TEST_PARKED_SIGNING_KEY"
FILE_TIMEOUT_S = 60.0
BROKEN_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA-broken\n-----END OPENSSH PRIVATE KEY-----\n"


def parked(provider: str, reason: str) -> float | None:
    labels = {"provider": provider, "reason": reason}
    return REGISTRY.get_sample_value("reverser_commit_provider_parked", labels)


def _providers(tmp_path: Path, signing: SigningSettings) -> tuple[ProviderSettings, ProviderSettings]:
    good = ProviderSettings(name="good", url=str(bare_remote(tmp_path / "good.git")), commit_window_s=0)
    bad = ProviderSettings(
        name="bad",
        url=str(bare_remote(tmp_path / "bad.git")),
        commit_window_s=0,
        committer=COMMITTER,
        signing=signing,
    )
    return good, bad


def _configured(settings: Settings, *providers: ProviderSettings) -> Settings:
    targets = [TargetSettings(name=f"t-{p.name}", provider=p.name, path=p.name) for p in providers]
    return settings.model_copy(update={"providers": list(providers), "targets": targets})


def _work(provider: str) -> Work:
    return Work(provider=provider, target=f"t-{provider}", path=provider, step_ms=10)


def _files(remote: Path) -> dict[str, str]:
    return files(remote) if (remote / "refs" / "heads" / "main").exists() else {}


def _verified_signed(tmp_path: Path, remote: Path, key: Path) -> list[str]:
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{COMMITTER.email} {key.with_suffix('.pub').read_text()}", encoding="ascii")
    return verify_all(remote, None, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")


async def test_a_provider_whose_key_variable_is_unset_waits_and_goes_on_once_it_is_set(
    settings: Settings, any_log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    good, bad = _providers(tmp_path, SigningSettings(format="ssh", key_env=KEY_ENV))
    configured = _configured(settings, good, bad)
    await any_log.create_topics(topic_specs(configured))
    worker = CommitWorker(configured, any_log)  # once: ConfigError, and `reverser run` exited 2
    await worker.start()
    try:
        assert parked("bad", "missing_key") == 1
        good_work, bad_work = _work("good"), _work("bad")
        await append_work(
            any_log,
            configured,
            [
                bad_work.create(cm("one")),
                good_work.create(cm("a")),
                bad_work.update(cm("one", v="2")),
                bad_work.create(cm("two")),
                good_work.create(cm("b")),
            ],
        )
        await wait_for(lambda: len(_files(Path(good.url))) == 2, "the good commits", timeout_s=FILE_TIMEOUT_S)
        assert not (Path(bad.url) / "refs" / "heads" / "main").exists(), "the parked provider pushed nothing"
        assert worker.failure() is None
        assert worker.ready()

        key = keygen(tmp_path / "signing")
        monkeypatch.setenv(KEY_ENV, key.read_text(encoding="ascii"))
        await worker.apply(configured)  # the same configuration, its variable set now
        assert parked("bad", "missing_key") is None
        await wait_settled(any_log, configured, timeout_s=FILE_TIMEOUT_S)
        await append_work(any_log, configured, [bad_work.create(cm("three"))])
        await wait_settled(any_log, configured, timeout_s=FILE_TIMEOUT_S)
    finally:
        await worker.stop()
    assert log_lines(Path(bad.url), fmt="%s") == [
        "[CREATE] v1/configmaps/one",
        "[UPDATE] v1/configmaps/one",
        "[CREATE] v1/configmaps/two",
        "[CREATE] v1/configmaps/three",
    ], "the waiting work, once each and in log order, then new work"
    assert (
        _verified_signed(tmp_path, Path(bad.url), key)
        == [f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"] * 4
    )
    assert sorted(files(Path(good.url))) == ["good/team-a/configmaps/a.yaml", "good/team-a/configmaps/b.yaml"]


async def test_a_parked_provider_removed_from_the_configuration_has_its_work_dead_lettered(
    settings: Settings, any_log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    good, bad = _providers(tmp_path, SigningSettings(format="ssh", key_env=KEY_ENV))
    configured = _configured(settings, good, bad)
    await any_log.create_topics(topic_specs(configured))
    worker = CommitWorker(configured, any_log)
    await worker.start()
    before = dead_lettered("unknown_provider")
    try:
        bad_work, good_work = _work("bad"), _work("good")
        await append_work(any_log, configured, [bad_work.create(cm("one")), bad_work.create(cm("two"))])
        await worker.apply(_configured(settings, good))
        assert parked("bad", "missing_key") is None
        await append_work(any_log, configured, [good_work.create(cm("a"))])
        await wait_settled(any_log, configured, timeout_s=FILE_TIMEOUT_S)
    finally:
        await worker.stop()
    assert dead_lettered("unknown_provider") == before + 2
    assert sorted(files(Path(good.url))) == ["good/team-a/configmaps/a.yaml"]


async def test_a_broken_signing_key_parks_its_provider_and_its_status_says_why(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    base = settings.model_copy(
        update={"custom_resources": settings.custom_resources.model_copy(update={"enabled": True})}
    )
    await any_log.create_topics(topic_specs(base))
    key_file = tmp_path / "broken-key"
    key_file.write_text(BROKEN_KEY, encoding="ascii")
    good, bad = _providers(tmp_path, SigningSettings(format="ssh", key_file=key_file))
    published = Published(any_log, base)
    targets = _configured(base, good, bad).targets
    first = await published.publish([good, bad], targets)
    follower = ConfigFollower(any_log, TopicNames.for_prefix(base.log.topic_prefix).config)
    worker = CommitWorker(first, any_log)
    await worker.start()
    try:
        assert parked("bad", "invalid_key") == 1

        async def reported(ok: bool) -> bool:
            await follower.catch_up()
            report = follower.credentials.get("bad")
            return report is not None and report.ok is ok

        await wait_for(lambda: reported(False), "the parked provider's report", timeout_s=FILE_TIMEOUT_S)
        report = follower.credentials["bad"]
        assert (report.reason, report.secret) == ("invalid_key", "")
        assert report.message == (
            "the commit worker parked this provider, its branches wait: providers[bad].signing: key_file "
            f"{key_file} is not an SSH private key this service can read"
        )
        assert "AAAA" not in report.message
        assert follower.credentials["good"].ok, "the good provider's access works, and says so"
        provider_object = ObjectReport(ObjectRef(Kind.GIT_PROVIDER, "team-a", "bad"), 1)
        ready = object_status(provider_object, None, credentials=report)["conditions"][0]
        assert (ready["status"], ready["reason"]) == ("False", "CredentialsUnavailable")
        assert ready["message"] == report.message

        key = keygen(tmp_path / "signing")
        key_file.write_text(key.read_text(encoding="ascii"), encoding="ascii")
        await worker.apply(await published.publish([good, bad], targets))
        await wait_for(lambda: reported(True), "the fixed provider's report", timeout_s=FILE_TIMEOUT_S)
        assert parked("bad", "invalid_key") is None
    finally:
        await worker.stop()
        await follower.close()


async def test_the_service_starts_from_a_published_configuration_with_a_parked_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a restart does: the configuration of custom resources on the config topic names it."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    base = Settings(
        workdir=tmp_path / "work",
        log={"backend": "embedded", "fsync": False},
        metrics=MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
        clusters=[ClusterSettings(name="prod")],
        custom_resources={"enabled": True},
    )
    good, bad = _providers(tmp_path, SigningSettings(format="ssh", key_env=KEY_ENV))
    targets = _configured(base, good, bad).targets
    setup = Service(base, factories=[])
    await setup.start()
    try:
        await Published(setup.log, base).publish([good, bad], targets)
        await append_work(setup.log, base, [_work("bad").create(cm("one")), _work("good").create(cm("a"))])
    finally:
        await setup.stop()
    service = Service(base, factories=[commit_component.build])
    await service.start()  # once: ConfigError, exit 2, on every restart
    try:
        assert service.config_version == 1
        assert service.failures() == []
        await wait_for(
            lambda: (Path(good.url) / "refs/heads/main").exists(), "the good provider's commit", timeout_s=60
        )
        assert service.ready()
    finally:
        await service.stop()
    assert sorted(files(Path(good.url))) == ["good/team-a/configmaps/a.yaml"]
    assert not (Path(bad.url) / "refs" / "heads" / "main").exists()


def test_an_openpgp_key_behind_a_passphrase_is_an_access_error_not_a_failed_commit(tmp_path: Path) -> None:
    """It lists like a usable key but cannot sign unattended: found when the access is built, it
    parks the provider instead of killing a branch FIFO at its first commit (and every restart's)."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    subprocess.run(
        [
            "gpg",
            f"--homedir={home}",
            "--batch",
            "--pinentry-mode=loopback",
            "--passphrase=locked",
            "--quick-gen-key",
            f"{COMMITTER.name} <{COMMITTER.email}>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    _, bad = _providers(tmp_path, SigningSettings(format="openpgp", gpg_home=home))
    try:
        with pytest.raises(AccessError, match=r"providers\[bad\]\.signing: the OpenPGP key cannot") as raised:
            provider_access(bad, None, tmp_path / "keys")
    finally:
        stop_gpg_agent(home)
    assert raised.value.reason == "invalid_key"
