"""Telling a typo from a field of another gitops-reverser release.

A field this project does not read is accepted and reported as unsupported, because another GR
release may define it (docs/custom-resources.md). But `spec.brnach` next to the `spec.branch` this
project reads is a typo no release defines, and accepting it left the target without its branch
while `config check` exited 0. A set field whose name is a near miss of a sibling this project
reads is therefore an error that names the field meant.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

__all__ = ["TYPO_CUTOFF", "meant_field"]

#: How close (difflib's ratio) a field's name must be to a read sibling's to count as its typo:
#: `brnach`/`branch` is 0.83, `mdoe`/`mode` 0.75; distinct names of one object rarely come so close.
TYPO_CUTOFF = 0.75
_INDEX = re.compile(r"\[\d+\]")


def meant_field(shown: str, supported: Sequence[str]) -> str | None:
    """The read field that `shown` (a set path such as `spec.rules[0].resourcs`) misspells, as a
    display path, or None when `shown` is no near miss (a field of another release, or a child of
    one). `supported` are the kind's read paths, `[]` standing for any list index."""
    pattern = _INDEX.sub("[]", shown)
    segments = pattern.replace("[]", ".[]").split(".")
    known = [s.replace("[]", ".[]").split(".") for s in supported]
    for depth in range(1, len(segments)):
        parent, name = segments[:depth], segments[depth]
        siblings = sorted({k[depth] for k in known if len(k) > depth and k[:depth] == parent})
        if name in siblings:
            continue
        close = difflib.get_close_matches(name, siblings, n=1, cutoff=TYPO_CUTOFF)
        if not close:
            return None
        shown_segments = _INDEX.sub(lambda m: "." + m.group(0), shown).split(".")
        return ".".join([*shown_segments[:depth], close[0]]).replace(".[", "[")
    return None
