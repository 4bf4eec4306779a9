"""`reverser completion bash|zsh` (issue 33, CLI conventions): the script is generated from the
parser, so it completes every subcommand and flag there is, and bash runs it as printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REVERSER = Path(sys.executable).with_name("reverser")


def script(shell: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    done = subprocess.run([str(REVERSER), "completion", shell], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def bash_completion() -> str:
    return script("bash")


def complete(script_text: str, *typed: str) -> list[str]:
    """What bash offers after `reverser TYPED...` (the last word is the one being completed)."""
    probe = (f"{script_text}\nCOMP_WORDS=(reverser {' '.join(typed)}); COMP_CWORD={len(typed)}\n"
             "_reverser; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        (("to",), ["topics"]),
        (("topics", "de"), ["describe"]),
        (("lag", "--gr"), ["--group"]),
        (("--log-level", "DEBUG", "dead-letter", "list", "--pe"), ["--pending"]),
        (("topics", "list", "--log-f"), ["--log-format"]),
        (("completion", "z"), ["zsh"]),
    ],
)
def test_bash_completes_subcommands_flags_and_choices(
    bash_completion: str, typed: tuple[str, ...], expected: list[str]
) -> None:
    assert complete(bash_completion, *typed) == expected


def test_zsh_runs_the_same_function_through_bashcompinit(bash_completion: str) -> None:
    zsh = script("zsh")
    assert zsh.startswith("#compdef reverser\n")
    assert "bashcompinit" in zsh
    assert zsh.endswith(bash_completion)
    if shutil.which("zsh") is not None:
        subprocess.run(["zsh", "-c", f"autoload -U compinit && compinit -u\n{zsh}"], check=True, timeout=60)
