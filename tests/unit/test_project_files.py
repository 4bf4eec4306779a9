"""The files a newcomer reads first stay true (issue 31, item 6): the docs index lists every
document, its links resolve, LICENSE is the license pyproject declares, the changelog has the
sections others add to, the commands CONTRIBUTING.md names exist, and the pre-commit hooks run
the venv's own tools.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
#: The license text each SPDX identifier the project may declare must carry, word for word.
LICENSE_MARKERS = {
    "Apache-2.0": ("Apache License", "Version 2.0, January 2004", "END OF TERMS AND CONDITIONS"),
}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def links(path: Path) -> list[Path]:
    return [
        (path.parent / target).resolve()
        for target in LINK.findall(read(path))
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def test_the_docs_index_lists_every_document_and_every_link_resolves() -> None:
    index = DOCS / "README.md"
    linked = links(index)
    documents = {p.resolve() for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert documents - set(linked) == set(), "documents under docs/ missing from docs/README.md"
    assert [p for p in linked if not p.exists()] == []


def test_contributing_and_changelog_links_resolve() -> None:
    for name in ("CONTRIBUTING.md", "CHANGELOG.md"):
        assert [p for p in links(REPO_ROOT / name) if not p.exists()] == [], name


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    declared = tomllib.loads(read(REPO_ROOT / "pyproject.toml"))["project"]["license"]
    assert declared in LICENSE_MARKERS, f"no known text for SPDX {declared!r}"
    text = read(REPO_ROOT / "LICENSE")
    assert all(marker in text for marker in LICENSE_MARKERS[declared])


def test_the_changelog_has_an_unreleased_section_with_what_moved_where() -> None:
    headings = [line for line in read(REPO_ROOT / "CHANGELOG.md").splitlines() if line.startswith("#")]
    unreleased = headings.index("## [Unreleased]")
    following = headings[unreleased + 1 :]
    section = following[: next((i for i, h in enumerate(following) if h.startswith("## ")), len(following))]
    assert "### What moved where" in section
    released = [h for h in following if h.startswith("## [")]
    assert released, "the first entry sums up the history"
    assert all(re.fullmatch(r"## \[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", h) for h in released), released


def test_the_make_targets_contributing_names_exist() -> None:
    makefile = read(REPO_ROOT / "Makefile")
    named = set(re.findall(r"`make ([a-z0-9-]+)", read(REPO_ROOT / "CONTRIBUTING.md")))
    assert named, "CONTRIBUTING.md names its commands"
    missing = {t for t in named if not re.search(rf"^{re.escape(t)}:", makefile, re.MULTILINE)}
    assert missing == set()


def test_the_pre_commit_hooks_run_the_venvs_ruff_mypy_and_import_contract() -> None:
    """The hooks check with the venv's tools, the same checks as `make lint`, formatting included."""
    config = yaml.safe_load(read(REPO_ROOT / ".pre-commit-config.yaml"))
    [repo] = config["repos"]
    assert repo["repo"] == "local"
    entries = {hook["id"]: hook["entry"].split()[0] for hook in repo["hooks"]}
    assert set(entries) == {"ruff", "ruff-format", "mypy", "import-contract"}
    scripts = Path(sys.executable).parent
    for tool in entries.values():
        assert tool.startswith(".venv/bin/"), tool
        assert (scripts / Path(tool).name).exists(), f"{tool} is not installed by make install-test"
