"""`reverser run --demo --once`: the whole pipeline on the embedded log, as `make run` runs it."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import load_settings
from tests.secrets.keys import AgeKey, sops_decrypt
from tests.support.net import free_port

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
    return subprocess.run(["bash", "-c", command], cwd=cwd, env={**env, "PATH": path},
                          capture_output=True, text=True, timeout=60, check=False)


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
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "reverser run: --demo needs the secrets extra (module pyrage is missing): "
        "pip install 'reverser-pipeline[secrets]'"
    ]
    assert not (tmp_path / "w").exists()
