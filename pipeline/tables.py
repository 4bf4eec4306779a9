"""Plain-text tables for the command line: one owner of the layout every `--output table` shares."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["aligned"]


def aligned(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns two spaces apart, without trailing blanks (first row: header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
