"""No configured or tenant-given value reaches an external tool as an option.

`signing.key_id: --logger-file=PATH` once made gpg append to any file the service could write (on
a branch's clone config, it stopped that branch for good). The settings refuse such a key id,
naming the field; and every argv this project builds puts user-influenced values after `--` /
`--end-of-options`, in option form (`--flag=value`), or as the value of a getopt short option. The
tests: the refusal, a source scan that lists every place a tool is started (a new one must be
audited here), the argv of each builder with hostile values, real gpg given a hostile key (the
committer email, which a GitProvider sets) writing nothing, and real signing still verifying.
"""

from __future__ import annotations

import ast
import asyncio
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.commit.git import repo as gitrepo
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.git.signing import GpgSigner, SigningError, SshSigner
from pipeline.commit.git.sshremote import SshTransport
from pipeline.commit.kustomize import build_argv
from pipeline.config import ConfigError, EncryptionSettings, SigningSettings, load_settings
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import parse_object
from pipeline.sealing.sealer import Sealer
from tests.commit.helpers import git
from tests.commit.test_ssh_and_signing import (
    commit_and_push,
    gpg_home_with_key,
    init_bare,
    provider,
    stop_gpg_agent,
)
from tests.support.gitsign import COMMITTER, verify_all

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
HOSTILE = "--logger-file=/tmp/reverser-injected"

# Every place the service starts an external tool (module, function): each builds its argv as the
# tests below check. A new one fails here until it is added, and audited, too.
TOOL_CALLS = {
    ("commit/git/repo.py", "set_branch"),  # git gc: the clone's own path only
    ("commit/git/repo.py", "_git"),  # git fetch/push/ls-remote/log: test_git_puts_urls_and_revisions...
    ("commit/git/signing.py", "_run"),  # gpg, ssh-keygen: test_signers_take_values_in_option_form
    ("sealing/sealer.py", "seal"),  # sops: test_sops_takes_values_in_option_form
    ("commit/replay_cli.py", "_target_url"),  # git init --end-of-options PATH
    ("demo/runner.py", "ensure_bare_remote"),  # git init --end-of-options PATH
    ("demo/runner.py", "git_history"),  # git --git-dir=PATH log: the demo's own remote
    ("buildinfo.py", "build_commit"),  # git -C PATH rev-parse HEAD: the package's own checkout
    ("commit/kustomize.py", "_build"),  # kustomize build -- PATH: test_kustomize_takes_its_folder...
}


_STARTERS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "os": {"system", "popen", "execv", "execvp", "execve", "spawnv", "spawnvp"},
}


def _tool_calls() -> set[tuple[str, str]]:
    """(module, enclosing function) of every call that starts a process."""
    found = set()
    for path in PIPELINE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.attr in _STARTERS.get(node.func.value.id, ())
                ):
                    found.add((str(path.relative_to(PIPELINE)), function.name))
    return found


def _safe(argv: Sequence[str], value: str, *, short_options: Sequence[str] = ()) -> bool:
    """Whether every occurrence of `value` in `argv` is one no tool can read as an option."""
    end = next((i for i, arg in enumerate(argv) if arg in ("--", "--end-of-options")), len(argv))
    for index, arg in enumerate(argv):
        if value not in arg:
            continue
        after_end = index > end
        option_form = arg.startswith("-") and "=" in arg and arg.index("=") < arg.index(value)
        short_value = index > 0 and argv[index - 1] in short_options
        if not (after_end or option_form or short_value):
            return False
    return True


# the settings boundary --------------------------------------------------------------------------


@pytest.mark.parametrize("key_id", [HOSTILE, "-u", "ABCD EF01", "x; rm -rf /", "0x12345", "<a@b.example"])
def test_a_key_id_that_is_no_openpgp_key_is_refused_naming_the_field(tmp_path: Path, key_id: str) -> None:
    config = tmp_path / "config.yaml"
    signing = {"format": "openpgp", "key_id": key_id}
    config.write_text(yaml.safe_dump({"providers": [{"name": "p", "url": "/r.git", "signing": signing}]}))
    with pytest.raises(ConfigError, match=r"providers\.0\.signing\.key_id: .*not an OpenPGP key id"):
        load_settings(config, environ={})


def _signing_provider(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "configbutler.ai/v1alpha3",
        "kind": "GitProvider",
        "metadata": {"name": "repo", "namespace": namespace, "generation": 1},
        "spec": {
            "url": "https://git.example.com/team-a/state.git",
            "pipeline": {"signing": {"format": "openpgp", "key_id": HOSTILE}},
        },
    }


def test_a_gitprovider_giving_such_a_key_id_is_refused_naming_its_field() -> None:
    """The home namespace's path: `spec.pipeline` of a GitProvider, validated by the same settings."""
    compiled = compile_resources([parse_object(_signing_provider("reverser"))], home_namespace="reverser")
    assert compiled.providers == []
    [(ref, problem)] = compiled.errors
    assert (ref.name, problem.path) == ("repo", "spec.pipeline.signing.key_id")
    assert "not an OpenPGP key id" in problem.message


def test_a_tenant_gitprovider_may_not_configure_signing_in_its_pipeline_at_all() -> None:
    """Outside the home namespace the tenant boundary refuses the whole field first."""
    compiled = compile_resources([parse_object(_signing_provider("team-a"))], home_namespace="reverser")
    assert compiled.providers == []
    assert [(ref.name, problem.path) for ref, problem in compiled.errors] == [
        ("repo", "spec.pipeline.signing")
    ]


@pytest.mark.parametrize(
    "key_id",
    [
        "0123ABCD",
        "0x0123456789ABCDEF",
        "0123456789abcdef0123456789abcdef01234567",
        "A" * 64,
        "bot@reverser.example",
        "<bot@reverser.example>",
    ],
)
def test_key_ids_gpg_reads_as_keys_are_accepted(key_id: str) -> None:
    assert SigningSettings(format="openpgp", key_id=key_id).key_id == key_id


def test_ssh_signing_takes_no_key_id() -> None:
    with pytest.raises(ValueError, match="key_id names an OpenPGP key"):
        SigningSettings(format="ssh", key_file=Path("k"), key_id="0123ABCD")


# the argv builders ------------------------------------------------------------------------------


def test_every_tool_invocation_is_one_audited_here() -> None:
    assert _tool_calls() == TOOL_CALLS


def test_kustomize_takes_its_folder_after_the_end() -> None:
    argv = build_argv("kustomize", Path(HOSTILE))
    assert _safe(argv, HOSTILE), argv
    assert argv[:3] == ["kustomize", "build", "--"]
    assert Path(argv[3]).is_absolute()


def test_signers_take_values_in_option_form() -> None:
    gpg = GpgSigner(Path(HOSTILE), HOSTILE)
    for argv in (gpg.sign_argv(), gpg.list_argv()):
        assert _safe(argv, HOSTILE), argv
    assert gpg.list_argv()[-2:] == ["--", HOSTILE]
    ssh = SshSigner(Path(HOSTILE))
    assert _safe(ssh.argv(), HOSTILE, short_options=["-f"])
    assert ssh.argv()[-2:] == ["-f", HOSTILE], "nothing after the key file's -f"


def test_ssh_command_takes_values_as_option_values() -> None:
    command = SshTransport(Path(HOSTILE), Path(HOSTILE), strict=True).command()
    argv = shlex.split(command)
    assert _safe(argv, HOSTILE, short_options=["-i", "-o"])
    assert f"UserKnownHostsFile={HOSTILE}" in argv


def test_sops_takes_values_in_option_form() -> None:
    recipient = "age1" + "q" * 58
    settings = EncryptionSettings(age_recipients=[recipient], sops_config=Path(HOSTILE))
    argv = Sealer(settings, b"k" * 32, "sops").argv(HOSTILE, "^(?:data)$")
    assert _safe(argv, HOSTILE)
    assert _safe(argv, recipient)
    assert argv[-1] == "/dev/stdin"


async def test_git_puts_urls_and_revisions_after_end_of_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real git commands of a clone, recorded on their way to the real git."""
    remote = init_bare(tmp_path / "remote.git")
    seen: list[tuple[str, ...]] = []
    real = asyncio.create_subprocess_exec

    async def recording(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
        seen.append(argv)
        return await real(*argv, **kwargs)

    monkeypatch.setattr(gitrepo.asyncio, "create_subprocess_exec", recording)  # type: ignore[attr-defined]
    await commit_and_push(tmp_path, provider(str(remote)), "a")
    repo = LocalRepo(tmp_path / "probe.git", str(remote))
    try:
        await repo.fetch()
        heads = await repo.remote_heads()
        assert await repo.last_commit_touching(heads["main"], "live") == heads["main"]
    finally:
        repo.close()
    commands = {argv[3] for argv in seen}
    assert {"fetch", "push", "ls-remote", "log"} <= commands, commands
    for argv in seen:
        values = [str(remote), heads["main"]] if argv[3] == "log" else [str(remote)]
        for value in values:
            assert not any(value in arg for arg in argv) or _safe(argv, value), argv


# real tools -------------------------------------------------------------------------------------


def _fingerprint(home: Path) -> str:
    listed = subprocess.run(
        ["gpg", f"--homedir={home}", "--with-colons", "--list-secret-keys"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))


def test_gpg_given_an_option_as_its_key_writes_nothing(tmp_path: Path) -> None:
    """The committer email a GitProvider sets is the key when key_id is unset: gpg must look it up."""
    home = gpg_home_with_key(tmp_path, f"{COMMITTER.name} <{COMMITTER.email}>")
    target = tmp_path / "appended"
    signer = GpgSigner(home, f"--logger-file={target}")
    try:
        with pytest.raises(SigningError):
            signer.user_ids()
        with pytest.raises(SigningError):
            signer.sign(b"payload")
    finally:
        stop_gpg_agent(home)
    assert not target.exists(), "gpg took the key for an option and wrote its log there"


async def test_gpg_signs_by_fingerprint_and_the_commits_verify(tmp_path: Path) -> None:
    remote = init_bare(tmp_path / "remote.git")
    home = gpg_home_with_key(tmp_path, f"{COMMITTER.name} <{COMMITTER.email}>")
    fingerprint = _fingerprint(home)
    signing = SigningSettings(format="openpgp", gpg_home=home, key_id=f"0x{fingerprint}")
    try:
        await commit_and_push(tmp_path, provider(str(remote), signing=signing), "a")
        lines = verify_all(remote, {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"})
    finally:
        stop_gpg_agent(home)
    assert lines == [f"G|{COMMITTER.name} <{COMMITTER.email}>|{COMMITTER.name} <{COMMITTER.email}>"]
    assert git(remote, "log", "--format=%s", "main").strip() == "[CREATE] v1/configmaps/a"
