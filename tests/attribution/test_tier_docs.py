"""The tiers as docs/attribution.md ranks them are the tiers the code has, in the same order.

`reverser resolve` prints `MATCHED_ON` beside each tier and points operators at the doc's table,
so a tier added, renamed or reordered in one place and not the other is a bug users would read.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.attribution.model import MATCHED_ON, TIERS, Tier

DOC = Path(__file__).resolve().parents[2] / "docs" / "attribution.md"
# A row of the tier table: "| `tier` ..." (the table whose header is "| tier | reachable by |").
ROW = re.compile(r"^\| `(?P<tier>[a-z_]+)`(?: \((?P<qualifier>[a-z]+)\))? \|")


def documented_tiers() -> list[str]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| tier | reachable by |"))
    rows: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        if match is not None and match["tier"] not in rows:
            rows.append(match["tier"])
    return rows


def test_every_tier_is_in_the_docs_table_in_rank_order() -> None:
    documented = documented_tiers()
    assert set(documented) == {tier.value for tier in TIERS}
    # The doc lists `name` twice (its delete form ranks above the scope tiers); the code's order is
    # that of each tier's first row.
    assert documented == [tier.value for tier in TIERS]


def test_every_tier_says_what_it_matched_on() -> None:
    assert set(MATCHED_ON) == set(Tier)
    assert all(MATCHED_ON[tier].strip() for tier in Tier)
