"""A reload (SIGHUP's path) whose file drops a provider removes that provider's key files from the
running commit worker's keys directory; a start removes those of providers the file lacks.
Real service with the router and commit stages on the embedded log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.commit import component as commit_component
from pipeline.config import (
    ClusterSettings,
    LogSettings,
    MetricsSettings,
    ProviderSettings,
    Settings,
    SigningSettings,
    SshSettings,
    TargetSettings,
)
from pipeline.router import component as router_component
from pipeline.service.app import Service
from tests.support.gitsign import keygen
from tests.support.net import free_port

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"


async def test_a_reload_without_a_provider_removes_its_key_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SSH_KEY", KEY)
    # a signing key is checked when the provider's access is built (one that cannot sign parks it)
    monkeypatch.setenv("TEST_SIGNING_KEY", keygen(tmp_path / "signing").read_text(encoding="ascii"))
    keyed = ProviderSettings(
        name="keyed",
        url="ssh://git@127.0.0.1:1/repo.git",
        ssh=SshSettings(private_key_env="TEST_SSH_KEY", known_hosts_file=tmp_path / "known_hosts"),
        signing=SigningSettings(format="ssh", key_env="TEST_SIGNING_KEY"),
    )
    base = Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", fsync=False),
        metrics=MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
        clusters=[ClusterSettings(name="prod")],
        providers=[ProviderSettings(name="git", url=str(tmp_path / "none.git")), keyed],
        targets=[TargetSettings(name="t", provider="git", cluster="prod", path="t")],
    )
    keys = base.workdir / "keys"
    keys.mkdir(parents=True)
    (keys / "earlier.secret-known_hosts").write_text("left by a provider the file no longer has")
    file = [base]
    service = Service(
        base, factories=[router_component.build, commit_component.build], reload=lambda: file[0]
    )
    await service.start()
    try:
        assert sorted(p.name for p in keys.iterdir()) == ["keyed.signing-key", "keyed.ssh-key"]
        file[0] = base.model_copy(update={"providers": base.providers[:1]})
        await service.reload()
        assert [p.name for p in service.settings.providers] == ["git"]
        assert list(keys.iterdir()) == []
    finally:
        await service.stop()
