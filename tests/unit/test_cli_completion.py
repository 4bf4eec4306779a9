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
    done = subprocess.run(
        [str(REVERSER), "completion", shell], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def bash_completion() -> str:
    return script("bash")


def complete(script_text: str, *typed: str) -> list[str]:
    """What bash offers after `reverser TYPED...` (the last word is the one being completed)."""
    probe = (
        f"{script_text}\nCOMP_WORDS=(reverser {' '.join(typed)}); COMP_CWORD={len(typed)}\n"
        "_reverser; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
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


def test_bash_registers_the_function_for_reverser(bash_completion: str) -> None:
    """What `source <(reverser completion bash)` leaves behind: `reverser` completes through it."""
    done = subprocess.run(
        ["bash", "-c", f"{bash_completion}\ncomplete -p reverser"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "complete -o default -F _reverser reverser"


#: Drives an interactive zsh on a pseudo-terminal (the zsh/zpty module): loads the script under
#: `compinit` as `~/.zshrc` would, types the line and Tab, and prints what the completion system
#: offered, caught by wrapping `compadd` (every completion function ends in it). Markers that the
#: echoed input does not contain tell the probe's output from the terminal's.
ZSH_PROBE = r"""
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z 'PROMPT=; RPROMPT=; autoload -U compinit && compinit -u -D'
zpty -w z "source ${(q)1}"
zpty -w z 'compadd () { local -a hits; builtin compadd -A hits "$@";
  print -r -- "<hits"">${(j:,:)hits}</hits>"; }'
zpty -w z 'print -r -- "<rea""dy>"'
while zpty -r z line; do [[ $line == *'<ready>'* ]] && break; done
zpty -w z "$2"$'\t'
zpty -w z $'\C-u print -r -- "<do""ne>"\n'
out=
while zpty -r z line; do out+=$line; [[ $line == *'<done>'* ]] && break; done
print -r -- ${(M)${(f)"$(print -r -- $out | grep -o '<hits>[^<]*</hits>')"}:#<hits>?*}
zpty -d z
"""


@pytest.fixture(scope="module")
def zsh_completion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (scripts/install-system-tools.sh installs it)")
    path = tmp_path_factory.mktemp("zsh") / "reverser.zsh"
    path.write_text(script("zsh"), encoding="utf-8")
    return path


def zsh_offers(script_path: Path, line: str) -> list[str]:
    """What zsh's completion system offers on Tab after `line`, in a real interactive zsh."""
    done = subprocess.run(
        ["zsh", "-f", "-c", ZSH_PROBE, "probe", str(script_path), line],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    offered = done.stdout.split()
    assert offered, f"zsh offered nothing for {line!r}: {done.stderr}"
    return sorted(offered[0].removeprefix("<hits>").removesuffix("</hits>").split(","))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("reverser to", ["topics"]),
        (
            "reverser topics ",
            ["--debug", "--help", "--log-format", "--log-level", "-h", "check", "create", "describe", "list"],
        ),
        (
            "reverser topics list --",
            [
                "--bootstrap-server",
                "--config",
                "--debug",
                "--help",
                "--log-format",
                "--log-level",
                "--output",
                "--workdir",
            ],
        ),
        ("reverser lag --gr", ["--group"]),
        ("reverser --debug dead-letter list --pe", ["--pending"]),
        ("reverser completion ", ["--debug", "--help", "--log-format", "--log-level", "-h", "bash", "zsh"]),
    ],
)
def test_zsh_completes_subcommands_and_flags_under_compinit(
    zsh_completion: Path, line: str, expected: list[str]
) -> None:
    assert zsh_offers(zsh_completion, line) == expected


def test_the_zsh_script_is_the_bash_function_behind_bashcompinit(bash_completion: str) -> None:
    zsh = script("zsh")
    assert zsh.startswith("#compdef reverser\n")
    assert zsh.endswith(bash_completion)
