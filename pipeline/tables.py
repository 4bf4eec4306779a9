"""Output of the read commands: one owner of the table layout and of `-o/--output table|json|yaml`.

Every command that prints a table also prints its data as a document, for scripts (`json`) and for
people who read and diff YAML (`yaml`); sharing the flag and the serialisation here keeps the
commands from drifting apart in choices, key order or indentation.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import yaml

__all__ = ["OutputFormat", "add_output_argument", "aligned", "document"]

#: Indentation of a JSON document, in spaces.
JSON_INDENT_SPACES = 2


class OutputFormat(StrEnum):
    """What `-o/--output` accepts."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """`-o/--output table|json|yaml` (default table); `args.output` is an `OutputFormat`."""
    parser.add_argument(
        "-o",
        "--output",
        type=_output_format,
        choices=[f.value for f in OutputFormat],
        default=OutputFormat.TABLE,
        help="output format (default table)",
    )


def _output_format(text: str) -> OutputFormat | str:
    """A known format as the enum; anything else as typed, for argparse's choice check to refuse
    with the nearest choice (`pipeline.cli`), which a conversion error would not name."""
    try:
        return OutputFormat(text)
    except ValueError:
        return text


def document(data: Any, output: OutputFormat) -> str:
    """`data` (what `json.dumps` takes) as sorted JSON or YAML; the YAML is read back from the
    JSON, so both formats always hold the same document (enums, paths and dates as JSON has them)."""
    text = json.dumps(data, indent=JSON_INDENT_SPACES, sort_keys=True, default=str)
    if output is OutputFormat.YAML:
        return yaml.safe_dump(json.loads(text), sort_keys=True, allow_unicode=True).rstrip("\n")
    return text


def aligned(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns two spaces apart, without trailing blanks (first row: header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
