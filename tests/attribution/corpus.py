"""The mutation-lab recordings with their tokens made concrete, and what each scenario must resolve to.

The corpus README: give every token a concrete value of the right shape (UUID for `<uid-N>`,
digits for `<rv-N>`, a DNS label for `<ns-N>`) consistently within a scenario, and set every `<ts>`
to a recent UTC time with six fractional digits so facts fall inside the TTL and the window.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from tests.support.corpus import MUTATIONLAB

TOKEN = re.compile(r"<(?P<kind>[a-zA-Z]+)(?:-(?P<n>\d+))?>")


class Scenario(NamedTuple):
    """Expected audit decisions (file → (decision, reason)) and watch results (file → (tier, author))."""

    audits: dict[str, tuple[str, str]]
    watches: dict[str, tuple[str, str]]


ADMIN = "system:admin"
SCENARIOS: dict[str, Scenario] = {
    "configmap/create-succeeds": Scenario(
        {"audit.create.yaml": ("published", "queued")}, {"watch.added.yaml": ("exact", ADMIN)}
    ),
    "configmap/update": Scenario(
        {"audit.update.yaml": ("published", "queued")}, {"watch.modified.yaml": ("exact", ADMIN)}
    ),
    "configmap/server-side-apply": Scenario(
        {"audit.patch.yaml": ("published", "queued")}, {"watch.modified.yaml": ("exact", ADMIN)}
    ),
    "configmap/no-op-apply": Scenario({"audit.patch.yaml": ("published", "queued")}, {}),
    "configmap/generate-name-create": Scenario(
        {"audit.create.yaml": ("published", "queued")}, {"watch.added.yaml": ("exact", ADMIN)}
    ),
    "configmap/deletecollection": Scenario(
        {"audit.deletecollection.yaml": ("published", "queued")},
        {
            "watch.deleted.cm-a.yaml": ("deletecollection_body_uid", ADMIN),
            "watch.deleted.cm-b.yaml": ("deletecollection_body_uid", ADMIN),
            "watch.deleted.cm-c.yaml": ("deletecollection_body_uid", ADMIN),
        },
    ),
    "configmap/dry-run-create": Scenario({"audit.create.yaml": ("dropped", "dry_run")}, {}),
    "configmap/record-and-reject": Scenario({"audit.create.yaml": ("dropped", "failed_request")}, {}),
    "configmap/watch-resync": Scenario({}, {"watch.error.yaml": ("none", "")}),
    "configmap/watch-bookmark": Scenario({}, {"watch.bookmark.yaml": ("none", "")}),
    "configmap/watch-replay-collapse": Scenario(
        {}, {"watch.added.yaml": ("absent", ""), "watch.bookmark.yaml": ("none", "")}
    ),
    "deployment/status-update": Scenario(
        {}, {"watch.modified.1.yaml": ("absent", ""), "watch.modified.2.yaml": ("absent", "")}
    ),
    "pod/graceful-delete": Scenario(
        {}, {"watch.modified.yaml": ("absent", ""), "watch.deleted.yaml": ("absent", "")}
    ),
    "flunder/aggregated-api-write": Scenario(
        {"audit.create.yaml": ("dropped", "no_attribution_fact")}, {"watch.added.yaml": ("absent", "")}
    ),
}


def all_scenarios_on_disk() -> set[str]:
    return {f"{p.parent.name}/{p.name}" for p in MUTATIONLAB.glob("*/*") if p.is_dir()}


def materialise(scenario: str, target: Path) -> Path:
    """Copy a scenario with concrete token values into `target`; returns the directory."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    salt = uuid.uuid4().hex[:8]
    values: dict[str, str] = {}

    def concrete(match: re.Match[str]) -> str:
        token = match.group(0)
        kind, number = match.group("kind"), match.group("n") or "0"
        if kind == "ts":
            return now
        if token not in values:
            if kind == "uid":
                values[token] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{salt}-{number}"))
            elif kind == "rv":
                values[token] = str(1000 + int(number))
            elif kind == "ns":
                values[token] = f"ns-{salt}-{number}"
            else:
                values[token] = f"{kind}-{salt}-{number}"
        return values[token]

    out = target / scenario.replace("/", "__")
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted((MUTATIONLAB / scenario).iterdir()):
        (out / path.name).write_text(TOKEN.sub(concrete, path.read_text(encoding="utf-8")), encoding="utf-8")
    return out
