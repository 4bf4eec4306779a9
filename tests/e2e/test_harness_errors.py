"""The end-to-end harness itself, without a control plane: failure paths and the Git reader.

A control plane or service that cannot start must fail fast with the failing process's own words
and leave nothing running; the Git reader must see exactly what was pushed. These run in the
ordinary `make test` (no `e2e` marker).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cluster import controlplane
from tests.e2e.cluster.controlplane import ControlPlane, ControlPlaneError, ControlPlaneState
from tests.e2e.gitremote import GitRemote
from tests.e2e.service_process import ServiceError, ServiceProcess
from tests.support.net import free_port


def _fake_binary(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_a_process_that_dies_at_start_fails_with_its_log_tail(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_binary(bin_dir, "etcd", 'echo "etcd: cannot listen: address in use" >&2\nexit 3\n')
    _fake_binary(bin_dir, "kube-apiserver", "exit 0\n")
    plane = ControlPlane(tmp_path / "work", bin_dir, "https://127.0.0.1:1/audit-webhook/r")

    with pytest.raises(ControlPlaneError, match="etcd exited with 3") as failure:
        plane.start()

    assert "cannot listen: address in use" in str(failure.value)
    assert not (tmp_path / "work" / "state.json").exists()


def test_a_process_that_never_gets_ready_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Runs but never serves /health: the harness must give up and kill it, not leave it behind.
    _fake_binary(bin_dir, "etcd", f"echo $$ > {tmp_path}/etcd.pid\nexec sleep 300\n")
    monkeypatch.setattr(controlplane, "READY_TIMEOUT_S", 1.0)
    plane = ControlPlane(tmp_path / "work", bin_dir)

    with pytest.raises(ControlPlaneError, match="etcd not ready after"):
        plane.start()

    pid = int((tmp_path / "etcd.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_pki_gives_the_admin_system_masters_and_keeps_keys_private(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "work", tmp_path)
    subject = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-in", str(plane.pki.admin_cert)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "O = system:masters" in subject
    for key in (plane.pki.admin_key, plane.pki.apiserver_key, plane.pki.sa_signing_key):
        assert key.stat().st_mode & 0o077 == 0


def test_stop_without_state_reports_nothing_to_stop(tmp_path: Path) -> None:
    assert controlplane.main(["stop", "--workdir", str(tmp_path)]) == 1


def test_state_round_trips_through_the_workdir(tmp_path: Path) -> None:
    state = ControlPlaneState(1, 2, "http://127.0.0.1:3", "https://127.0.0.1:4", "/k", None)
    state.save(tmp_path)
    assert json.loads((tmp_path / "state.json").read_text())["apiserver_pid"] == 2
    assert ControlPlaneState.load(tmp_path) == state


def test_build_script_names_a_cache_dir_per_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REVERSER_E2E_CACHE", str(tmp_path))
    monkeypatch.setenv("KUBE_VERSION", "v1.99.0")
    monkeypatch.delenv("REVERSER_E2E_BIN_DIR", raising=False)
    assert controlplane.binaries_dir() == tmp_path / "bin" / "kube-v1.99.0"
    assert controlplane.find_binaries() is None


def test_a_service_that_exits_at_start_fails_with_its_own_words(tmp_path: Path) -> None:
    config = {"metrics": {"addr": f"127.0.0.1:{free_port()}"}, "targets": [{"name": "t"}]}
    service = ServiceProcess(tmp_path, config)

    with pytest.raises(ServiceError, match="exited with 2") as failure:
        service.start()

    assert "targets.0.provider" in str(failure.value)
    assert service.stop() is None


def test_git_remote_reads_history_files_and_trailers(tmp_path: Path) -> None:
    remote = GitRemote(tmp_path / "remote.git")
    assert remote.head() is None
    assert remote.commits() == []
    work = tmp_path / "work"
    git = ["git", "-C", str(work), "-c", "user.name=alice", "-c", "user.email=alice@example.invalid"]
    subprocess.run(["git", "clone", "-q", remote.url, str(work)], check=True, capture_output=True)
    (work / "a.yaml").write_text("a: 1\n")
    subprocess.run([*git, "add", "a.yaml"], check=True)
    subprocess.run(
        [*git, "commit", "-q", "-m", "add a\n\nReverser-Attribution: exact alice\nReverser-Offset: 3:14"],
        check=True,
    )
    subprocess.run([*git, "push", "-q", "origin", "HEAD:main"], check=True, capture_output=True)

    (commit,) = remote.commits()
    assert commit.author_name == "alice"
    assert commit.subject == "add a"
    assert commit.trailers == {"Reverser-Attribution": ["exact alice"], "Reverser-Offset": ["3:14"]}
    assert commit.changes == (("A", "a.yaml"),)
    assert remote.files() == {"a.yaml": "a: 1\n"}
    assert remote.commits(since=commit.sha) == []
    with pytest.raises(AssertionError, match=r"waiting for b\.yaml"):
        remote.wait_for(lambda r: "b.yaml" in r.files(), 0.5, "b.yaml")
