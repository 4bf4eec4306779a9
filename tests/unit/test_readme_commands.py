"""Every command the README shows runs as printed: its executable resolves, and its subcommand and
flags are the real parser's.

Issue 33, friction 1: `reverser lag --workdir .reverser` failed with `command not found` in a fresh
shell, since `reverser` exists only in `.venv/bin`. A command the README shows is either named by its
path (`.venv/bin/reverser ...`, which must exist after the install), or a `reverser ...` line of the
Commands section, which the README says to run inside `make shell` (a Makefile target). A command
without placeholders is parsed by the real `pipeline.cli` parser as is; a synopsis
(`reverser lag [--group REGEX] [--output table\\|json]`) must name real subcommands and flags only.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import pytest

from pipeline.cli import build_parser

REPO_ROOT = Path(__file__).resolve().parents[2]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
MAKEFILE = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
#: An inline code span, and a line of a fenced block.
SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: What makes a command a synopsis: optional parts, alternatives, upper-case placeholders.
SYNOPSIS = re.compile(r"[\[\]|]|\.\.\.|\b[A-Z][A-Z:]*\b")
SCRIPT_DIR = Path(sys.executable).parent


def readme_commands() -> list[str]:
    """Every `reverser`, `.venv/bin/...` and `make` command of the README, inline or in a fence."""
    found = list(SPAN.findall(README))
    found += [line.split("#")[0].strip() for block in FENCE.findall(README) for line in block.splitlines()]
    commands = [c for c in found if re.match(r"(reverser|\.venv/bin/\S+|make) ", c + " ")]
    # The error format `reverser <command>: <message>` is not a command.
    return sorted({c for c in commands if "<" not in c})


COMMANDS = readme_commands()


def test_the_readme_has_commands_to_check() -> None:
    assert len([c for c in COMMANDS if c.startswith("reverser ")]) >= 15
    assert any(c.startswith(".venv/bin/reverser ") for c in COMMANDS)


def test_the_readme_says_where_reverser_is_run() -> None:
    assert re.search(r"^shell:", MAKEFILE, re.MULTILINE)
    assert "inside `make shell`" in README


def alternatives(words: list[str]) -> list[list[str]]:
    """`topics create|check` as `topics create` and `topics check`."""
    expanded: list[list[str]] = [[]]
    for word in words:
        expanded = [[*head, option] for head in expanded for option in word.split("|")]
    return expanded


def leaf_of(parser: argparse.ArgumentParser, path: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser the leading words choose, and the words left."""
    current = parser
    for index, word in enumerate(path):
        action = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        if action is None or word not in action.choices:
            return current, path[index:]
        current = action.choices[word]
    return current, []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_runs_as_printed(command: str) -> None:
    text = command.replace("\\|", "|")
    program, _, rest = text.partition(" ")
    if program == "make":
        for target in rest.split():
            assert re.search(rf"^{re.escape(target)}:", MAKEFILE, re.MULTILINE), f"no make target {target}"
        return
    if program == "reverser":
        script = SCRIPT_DIR / "reverser"  # on PATH inside `make shell`
    else:
        assert program.startswith(".venv/bin/"), command
        script = SCRIPT_DIR / Path(program).name
        assert (REPO_ROOT / program).exists() or script.exists(), f"{program} is not installed"
    assert script.exists(), f"{script} is not installed"
    if Path(program).name != "reverser" or rest in ("", "..."):
        return  # the program named, not a command line
    if SYNOPSIS.search(rest):
        check_synopsis(rest)
    else:
        argv = shlex.split(rest)
        assert parse_status(argv) == 0, f"{command!r} does not parse"


def parse_status(argv: list[str]) -> int | str | None:
    """0 when the real parser takes `argv` (`--help` and `--version` stop it with 0), else its exit."""
    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as stopped:
        return stopped.code
    return 0


def check_synopsis(rest: str) -> None:
    """Each subcommand path of the synopsis exists and each flag it names is one of its options."""
    words = rest.replace("[", " ").replace("]", " ").split()
    path = [w for w in words if not w.startswith("-")]
    flags = {w.split("=")[0] for w in words if w.startswith("--")}
    parser = build_parser()
    for chosen in alternatives(path):
        leaf, left = leaf_of(parser, chosen)
        assert leaf is not parser, f"no subcommand in {rest!r}"
        known = {option for action in leaf._actions for option in action.option_strings}
        assert flags <= known, f"{leaf.prog}: unknown {sorted(flags - known)}"
        subcommands = [a for a in leaf._actions if isinstance(a, argparse._SubParsersAction)]
        assert not (subcommands and left and left[0] not in subcommands[0].choices), f"{rest!r}: {left}"
