"""Where the recorded corpus lives: the shared checkout, or `REVERSER_CORPUS` when set."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CORPUS", "MUTATIONLAB"]

CORPUS = Path(os.environ.get("REVERSER_CORPUS", "/work/shared/corpus"))
MUTATIONLAB = CORPUS / "mutationlab"
