"""The Grafana dashboard is what the typed generator builds, and Grafana's model reads it back."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel

from tests.monitoring.promtool import DASHBOARD

GENERATOR = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "dashboard.py"


def generated() -> str:
    render: Any = runpy.run_path(str(GENERATOR))["render"]
    text: str = render()
    return text


def test_committed_dashboard_is_the_generated_one() -> None:
    assert DASHBOARD.read_text() == generated(), "run `make dashboard` and commit the result"


def test_grafana_model_reads_every_panel_back() -> None:
    data = json.loads(DASHBOARD.read_text())
    model = Dashboard.from_json(data)
    assert model.uid == "reverser-pipeline"
    panels = model.panels or []
    rows = [p for p in panels if isinstance(p, RowPanel)]
    graphs = [p for p in panels if isinstance(p, Panel)]
    assert [r.title for r in rows] == [
        "Throughput and latency",
        "Attribution",
        "Consumer lag",
        "Git",
        "Fact index and watch",
    ]
    assert len({p.id_val for p in panels}) == len(panels), "panel ids must be unique"
    for panel in graphs:
        targets = panel.targets or []
        assert targets, f"panel {panel.title!r} has no query"
        ref_ids = [json.loads(json.dumps(t.to_json()))["refId"] for t in targets]  # type: ignore[attr-defined]
        assert len(set(ref_ids)) == len(ref_ids), f"panel {panel.title!r} repeats a refId"
        assert panel.datasource is not None
        assert panel.datasource.uid == "${datasource}"
