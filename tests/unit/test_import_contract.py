"""Every top-level module of the package is placed in the import contract and in its table.

A module the contract does not name may import anything from anywhere: `make lint` would keep
passing while the layering erodes. The same list is the table of docs/architecture.md.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pipeline

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(pipeline.__file__).parent


def _top_level_modules() -> set[str]:
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    return {f"pipeline.{name}" for name in names}


def _contract_modules() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # the package-wide layers; the other contracts nest inside a package (`containers`) or forbid
    contract = next(
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and "containers" not in c
    )
    return {name.strip() for layer in contract["layers"] for name in re.split(r"[|:]", layer)}


def test_every_top_level_module_is_in_a_layer_of_the_contract() -> None:
    missing = _top_level_modules() - _contract_modules()
    assert not missing, f"add to [tool.importlinter] layers in pyproject.toml: {sorted(missing)}"


def test_the_contract_names_only_modules_that_exist() -> None:
    assert _contract_modules() <= _top_level_modules()


def test_the_architecture_table_lists_every_layered_module() -> None:
    table = (ROOT / "docs" / "architecture.md").read_text().split("## Imports point down", 1)[1]
    table = table.split("\n\n", 3)[2]
    listed = set(re.findall(r"`(pipeline\.[a-z_]+)`", table))
    assert _contract_modules() - listed == set()


#: Stages whose pure cores may not import their I/O modules (the `forbidden` contracts).
NESTED = ("audit", "commit", "deadletter", "lag", "router", "watch")
#: A stage's modules that are neither: both its cores and its shells may import them.
NEITHER = {"metrics"}


def _classified() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    named: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "forbidden":
            named |= set(contract["source_modules"]) | set(contract["forbidden_modules"])
    return named


def test_every_module_of_a_stage_is_a_pure_core_or_an_io_shell() -> None:
    """A new module of a stage is placed on one side; unplaced, it could import either way."""
    named = _classified()
    for stage in NESTED:
        folder = PACKAGE / stage
        modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        unplaced = {f"pipeline.{stage}.{m}" for m in modules - NEITHER} - named
        assert not unplaced, f"add to a forbidden contract in pyproject.toml: {sorted(unplaced)}"
