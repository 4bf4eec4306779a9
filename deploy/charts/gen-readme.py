#!/usr/bin/env python3
"""Write the values table of the chart's README.md from the `# --` comments of values.yaml.

The convention is helm-docs': a comment block whose first line starts with `# --` documents the key
on the line right after the block; further `#` lines continue it. Only keys so documented are
listed (their children need comments of their own); the default is the value values.yaml gives.
The table sits between the README's `<!-- values:start -->` and `<!-- values:end -->` lines.

    deploy/charts/gen-readme.py           # rewrite the table in README.md
    deploy/charts/gen-readme.py --check   # exit 1 when the committed table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "reverser-pipeline"
START, END = "<!-- values:start -->", "<!-- values:end -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):(?:\s|$)")
DOC = re.compile(r"^ *# -- ?(?P<text>.*)$")
MORE = re.compile(r"^ *#(?: ?(?P<text>.*))?$")


class ReadmeError(Exception):
    """values.yaml or README.md is not in the form this script reads; the message says where."""


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if value is None:
        return "null"
    return "object"


def _lookup(values: Any, path: list[str], line: int) -> Any:
    node = values
    for part in path:
        if not isinstance(node, dict) or part not in node:
            raise ReadmeError(
                f"values.yaml:{line}: `{'.'.join(path)}` is documented but is no key of the values "
                "(a key inside a list item cannot be documented)"
            )
        node = node[part]
    return node


def rows(values_text: str) -> list[Row]:
    """The documented keys of a values.yaml, in file order."""
    values = yaml.safe_load(values_text)
    found: list[Row] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    pending_line = 0
    for number, line in enumerate(values_text.splitlines(), start=1):
        doc = DOC.match(line)
        if doc:
            if pending is not None:
                raise ReadmeError(
                    f"values.yaml:{number}: a second `# --` before any key (line {pending_line})"
                )
            pending, pending_line = [doc["text"].strip()], number
            continue
        more = MORE.match(line)
        if more:
            if pending is not None:
                pending.append((more["text"] or "").strip())
            continue
        key = KEY.match(line)
        if key:
            indent = len(key["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key["key"]))
            if pending is not None:
                path = [k for _, k in stack]
                value = _lookup(values, path, number)
                found.append(
                    Row(
                        key=".".join(path),
                        type=_type(value),
                        default=json.dumps(value, ensure_ascii=False),
                        description=" ".join(p for p in pending if p),
                    )
                )
                pending = None
            continue
        if pending is not None:
            raise ReadmeError(f"values.yaml:{pending_line}: the `# --` comment documents no key")
    if pending is not None:
        raise ReadmeError(f"values.yaml:{pending_line}: the `# --` comment documents no key")
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _prose(text: str) -> str:
    """A description cell: `<release>` outside code spans would be read as an HTML tag."""
    parts = _cell(text).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def table(found: list[Row]) -> str:
    lines = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for row in found:
        default = _cell(row.default).replace("`", "'")
        lines.append(f"| `{row.key}` | {row.type} | `{default}` | {_prose(row.description)} |")
    return "\n".join(lines)


def readme_with_table(readme: str, values_text: str) -> str:
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ReadmeError(f"README.md needs one `{START}` line and, after it, one `{END}` line")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    note = "<!-- generated by deploy/charts/gen-readme.py from values.yaml; do not edit -->"
    return f"{head}{START}\n{note}\n\n{table(rows(values_text))}\n\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the chart README's values table, from values.yaml")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table is stale")
    parser.add_argument("--chart", type=Path, default=CHART, help="the chart directory (default: ours)")
    args = parser.parse_args(argv)
    readme_path: Path = args.chart / "README.md"
    try:
        readme = readme_path.read_text()
        wanted = readme_with_table(readme, (args.chart / "values.yaml").read_text())
    except (OSError, ReadmeError, yaml.YAMLError) as exc:
        print(f"gen-readme: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if readme != wanted:
            print(f"{readme_path} is stale: run deploy/charts/gen-readme.py", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
