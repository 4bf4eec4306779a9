"""`reverser run --demo --once`: the whole pipeline on the embedded log, as `make run` runs it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.config import load_settings
from tests.secrets.keys import AgeKey, sops_decrypt
from tests.support.net import free_port
from tests.support.wait import wait_for

EXPECTED_AUTHORS = [
    ("Reverser Pipeline <noreply@reverser.invalid>", "snapshot"),
    ("Alice Liddell <alice@example.com>", "exact alice"),
    ("bob <bob@example.com>", "exact bob"),
    ("Alice Liddell <alice@example.com>", "exact alice"),
    ("Carol Danvers <carol@example.com>", "delete_sticky carol"),
    ("Dave Lister <dave@noreply.cluster.local>", "deletecollection_body_uid dave"),
    ("Erin Hannon <erin@example.com>", "exact erin"),
]
SECRET_VALUE = b"demo-not-a-real-key"


def run_demo(workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "run",
            "--demo",
            "--once",
            "--workdir",
            str(workdir),
            "--audit-addr",
            f"127.0.0.1:{free_port()}",
            "--metrics-addr",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def history(remote: Path) -> list[tuple[str, str, str]]:
    out = subprocess.run(
        [
            "git",
            f"--git-dir={remote}",
            "log",
            "--reverse",
            "main",
            "--format=%an <%ae>%x00%(trailers:key=Reverser-Attribution,valueonly,separator=%x2c)%x00%T",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [tuple(line.split("\x00")) for line in out.splitlines()]  # type: ignore[misc]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    workdir = tmp_path_factory.mktemp("demo")
    return workdir, run_demo(workdir)


def test_demo_prints_an_attributed_history_with_several_authors(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    workdir, result = demo_run
    assert result.returncode == 0, result.stderr[-3000:]
    remote = workdir.resolve() / "demo" / "remote.git"
    assert f"git repository: {remote}" in result.stdout
    commits = history(remote)
    assert [
        (author, tiers.split(" ")[0] if tiers.startswith("snapshot") else tiers)
        for author, tiers, _ in commits
    ] == EXPECTED_AUTHORS
    assert "Carol Danvers <carol@example.com>" in result.stdout


def test_demo_tree_holds_the_surviving_objects(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    workdir, result = demo_run
    assert result.returncode == 0, result.stderr[-3000:]
    remote = workdir.resolve() / "demo" / "remote.git"
    files = subprocess.run(
        ["git", f"--git-dir={remote}", "ls-tree", "-r", "--name-only", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    objects = sorted(f for f in files if f.startswith("clusters/default/shop/"))
    # legacy-settings (finalizer delete) and cache-a/cache-b (collection delete) are gone
    assert objects == [
        "clusters/default/shop/apps/deployments/web.yaml",
        "clusters/default/shop/configmaps/app-config.yaml",
        "clusters/default/shop/secrets/payment-gateway.sops.yaml",
    ]
    config = subprocess.run(
        ["git", f"--git-dir={remote}", "show", f"main:{objects[1]}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'max-cart-items: "80"' in config


def test_a_second_run_resumes_from_the_log_without_duplicate_commits(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    workdir, first = demo_run
    assert first.returncode == 0, first.stderr[-3000:]
    remote = workdir.resolve() / "demo" / "remote.git"
    before = history(remote)
    second = run_demo(workdir)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "already replayed" in second.stdout
    assert history(remote) == before


def test_demo_secret_is_in_git_only_encrypted_and_decrypts_with_the_demo_key(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    workdir, result = demo_run
    assert result.returncode == 0, result.stderr[-3000:]
    remote = workdir.resolve() / "demo" / "remote.git"
    path = "clusters/default/shop/secrets/payment-gateway.sops.yaml"
    sealed = subprocess.run(
        ["git", f"--git-dir={remote}", "show", f"main:{path}"], capture_output=True, check=True
    ).stdout
    assert b"ENC[AES256_GCM" in sealed
    encoded = base64.b64encode(SECRET_VALUE)
    key = AgeKey.from_file(workdir.resolve() / "demo" / "age.key")
    assert sops_decrypt(sealed, key, tmp_path)["data"] == {"api-key": encoded.decode()}
    assert "encrypted Secret:" in result.stdout
    stored = b"".join(p.read_bytes() for p in workdir.rglob("*") if p.is_file())
    assert b"payment-gateway" in stored, "the embedded log was read"
    objects = subprocess.run(
        ["git", f"--git-dir={remote}", "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    for where in (stored, objects, result.stdout.encode(), result.stderr.encode()):
        assert SECRET_VALUE not in where
        assert encoded not in where


def fresh_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` as a person pastes it into a new terminal: no virtualenv on PATH."""
    venv_bin = Path(sys.executable).parent
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != venv_bin)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REVERSER_", "VIRTUAL_ENV"))}
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def printed(result: subprocess.CompletedProcess[str], label: str) -> str:
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(label)]
    return line.removeprefix(label)


def test_the_commands_the_demo_prints_run_as_printed_in_a_fresh_shell(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Issue 33, friction 1: `sops` and `reverser` exist only in .venv/bin, so the printed commands
    name them by path; they run in a shell that never activated the virtualenv."""
    _, result = demo_run
    assert result.returncode == 0, result.stderr[-3000:]
    cwd = Path.cwd()
    decrypted = fresh_shell(printed(result, "encrypted Secret: "), cwd)
    assert decrypted.returncode == 0, decrypted.stderr
    assert base64.b64encode(SECRET_VALUE).decode() in decrypted.stdout
    lag = fresh_shell(printed(result, "consumer lag: "), cwd)
    assert lag.returncode == 0, lag.stderr
    assert lag.stdout.startswith("GROUP ")
    rebuilt = fresh_shell(printed(result, "rebuild the branch: "), cwd)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "commit(s) on main" in rebuilt.stdout
    doctor = fresh_shell(printed(result, "check the setup: "), cwd)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "all passed" in doctor.stdout
    assert_watch_rules_resolve(fresh_shell(printed(result, "the watch streams of its rules: "), cwd))


def assert_watch_rules_resolve(done: subprocess.CompletedProcess[str]) -> None:
    """Issue 33, friction 4: `watch-rules` on the demo printed a header only; the recorded
    discovery resolves every resource of its rule to a stream, and there are no problems."""
    assert done.returncode == 0, done.stdout + done.stderr
    streams = {tuple(line.split()[:4]) for line in done.stdout.splitlines()[1:] if line.strip()}
    assert streams == {
        ("shop", "default", resource, "shop")
        for resource in ("v1/configmaps", "v1/secrets", "apps/v1/deployments")
    }


def read_until(process: subprocess.Popen[str], label: str, deadline_s: float) -> list[str]:
    """The lines `process` prints up to and including the one starting with `label` (a safety
    limit, not an assertion on time: the demo replays its recording first). A thread reads, since
    select() on a buffered pipe misses the lines already in the buffer."""
    assert process.stdout is not None
    stream = process.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    stop_at = time.monotonic() + deadline_s
    while (left := stop_at - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if line.startswith(label):
            return seen
    raise AssertionError(f"no line {label!r} from the demo; it printed {seen[-10:]}")


def label_line(lines: list[str], label: str) -> str:
    (line,) = [line for line in lines if line.startswith(label)]
    return line.removeprefix(label)


def test_while_serving_the_demo_prints_next_commands_that_work_as_printed(tmp_path: Path) -> None:
    """Issue 33, friction 4: while `make run` serves, `reverser lag` is refused (the service holds
    the embedded log); the demo says to ask the running service's Burrow API instead, and which
    commands work after Ctrl-C. Each runs as printed, in a fresh shell, at the moment it says."""
    workdir = tmp_path / "served"
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("reverser")),
            "run",
            "--demo",
            "--workdir",
            str(workdir),
            "--audit-addr",
            f"127.0.0.1:{free_port()}",
            "--metrics-addr",
            f"127.0.0.1:{free_port()}",
            "--log-level",
            "WARNING",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = read_until(process, "check the setup: ", deadline_s=240)
        assert "after Ctrl-C (the service holds the embedded log until then):" in lines
        burrow = label_line(lines, "consumer lag now (Burrow's API of the running service): ")

        def lists_the_demo_groups() -> bool:
            done = fresh_shell(burrow, tmp_path)
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            assert answer["error"] is False
            return {"reverser.router", "reverser.commit-worker"} <= set(answer["consumers"])

        # The service's lag monitor lists the groups from its first poll after they committed.
        asyncio.run(
            wait_for(lists_the_demo_groups, "the demo's groups in Burrow's API", timeout_s=60, interval_s=0.5)
        )
        rules = fresh_shell(label_line(lines, "the watch streams of its rules: "), tmp_path)
        assert_watch_rules_resolve(rules)
        refused = fresh_shell(label_line(lines, "consumer lag: "), tmp_path)
        assert refused.returncode == 3, "the embedded log is the running service's"
        [line] = refused.stderr.splitlines()
        assert line.endswith(f"while it runs, ask its lag monitor: {burrow}"), line
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lag = fresh_shell(label_line(lines, "consumer lag: "), tmp_path)
    assert lag.returncode == 0, lag.stderr
    assert lag.stdout.startswith("GROUP ")
    rebuilt = fresh_shell(label_line(lines, "rebuild the branch: "), tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (workdir / "demo" / "replayed.git").is_dir()
    doctor = fresh_shell(label_line(lines, "check the setup: "), tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_the_demo_leaves_a_configuration_for_the_other_commands(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Issue 33, friction 4: the demo is a real configuration that `--config` can name."""
    workdir, result = demo_run
    assert result.returncode == 0, result.stderr[-3000:]
    settings = load_settings(workdir.resolve() / "demo" / "config.yaml", environ={})
    assert settings.workdir == workdir.resolve()
    assert [p.name for p in settings.providers] == ["demo"]
    assert Path(settings.providers[0].url) == workdir.resolve() / "demo" / "remote.git"


def test_without_the_secrets_extra_the_demo_names_it_in_one_line(tmp_path: Path) -> None:
    """Issue 33, friction 8: a plain `pip install` of the wheel has no pyrage; `run --demo` said
    `No module named 'pyrage'` in a traceback. (A `None` in sys.modules stands for the missing package.)"""
    probe = (
        "import sys; sys.modules['pyrage'] = None\n"
        "from pipeline.cli import main\n"
        f"sys.exit(main(['run', '--demo', '--once', '--workdir', {str(tmp_path / 'w')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "reverser run: --demo needs the secrets extra (module pyrage is missing): "
        "pip install 'reverser-pipeline[secrets]'"
    ]
    assert not (tmp_path / "w").exists()
