"""Where the recorded corpus lives: `tests/corpus/` in this repository, or `REVERSER_CORPUS` when set."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CORPUS", "MUTATIONLAB"]

CORPUS = Path(os.environ.get("REVERSER_CORPUS", Path(__file__).resolve().parents[1] / "corpus"))
MUTATIONLAB = CORPUS / "mutationlab"
