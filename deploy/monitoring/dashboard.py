"""Generates the chart's Grafana dashboard with Grafana's own typed model (grafana-foundation-sdk).

The dashboard is code so that every panel and query is built through the SDK's typed builders
(a wrong field or enum value fails here, not in a Grafana that silently ignores it) and so that the
metric names it queries can be checked against what the service exports
(tests/monitoring/test_metric_coverage.py). Run `make dashboard` after editing; the test
`tests/monitoring/test_dashboard.py` fails when the committed JSON differs from what this prints.

    python deploy/monitoring/dashboard.py            # print the JSON
    python deploy/monitoring/dashboard.py --write    # write deploy/charts/reverser-pipeline/files/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig, VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueColorMode,
    BigValueGraphMode,
    LegendDisplayMode,
    LegendPlacement,
    StackingMode,
)
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DataSourceRef

FILES = Path(__file__).resolve().parents[1] / "charts" / "reverser-pipeline" / "files"
TARGET = FILES / "grafana-dashboard.json"
UID = "reverser-pipeline"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
PANEL_HEIGHT = 8
HALF_WIDTH = 12
THIRD_WIDTH = 8
REF_IDS = "ABCDEFGH"


def query(expr: str, legend: str, ref_id: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref_id).datasource(DATASOURCE)


def series(
    title: str,
    unit: str,
    *queries: tuple[str, str],
    stacked: bool = False,
    width: int = HALF_WIDTH,
    description: str = "",
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(PANEL_HEIGHT)
        .span(width)
        .legend(
            VizLegendOptions()
            .show_legend(True)
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
    )
    if stacked:
        panel = panel.stacking(StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(30)
    for ref_id, (expr, legend) in zip(REF_IDS, queries, strict=False):
        panel = panel.with_target(query(expr, legend, ref_id))
    return panel


def single(title: str, unit: str, expr: str, legend: str, *, description: str = "") -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(PANEL_HEIGHT)
        .span(THIRD_WIDTH)
        .graph_mode(BigValueGraphMode.AREA)
        .color_mode(BigValueColorMode.VALUE)
        .with_target(query(expr, legend, REF_IDS[0]))
    )


def quantiles(metric: str, by: str, legend: str) -> list[tuple[str, str]]:
    rate = f"rate({metric}_bucket[{RATE}])"
    return [
        (f"histogram_quantile({q}, sum by (le{by}) ({rate}))", f"p{int(q * 100)} {legend}")
        for q in (0.5, 0.95, 0.99)
    ]


def build() -> dashboard.Dashboard:
    """The dashboard: throughput, latency, attribution, lag, Git, fact index, watch."""
    return (
        dashboard.Dashboard("Reverser Pipeline")
        .uid(UID)
        .tags(["reverser-pipeline", "kafka", "gitops"])
        .description("How the pipeline from audit webhook and watch streams to Git commits keeps up.")
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_row(dashboard.Row("Throughput and latency"))
        .with_panel(
            series(
                "Pipeline throughput per stage",
                "ops",
                (f"sum(rate(reverser_audit_facts_published_total[{RATE}]))", "audit facts published"),
                (f"sum(rate(reverser_watch_records_total[{RATE}]))", "watch events written"),
                (f"sum(rate(reverser_router_records_total[{RATE}]))", "watch events routed"),
                (f"sum(rate(reverser_router_work_items_total[{RATE}]))", "branch-work items"),
                (f"sum(rate(reverser_commit_commits_total[{RATE}]))", "commits"),
                description="Records per second through each stage, audit ingress to Git commit.",
            )
        )
        .with_panel(
            series(
                "End-to-end latency (watch event to pushed commit)",
                "s",
                *quantiles("reverser_commit_end_to_end_seconds", "", "end to end"),
            )
        )
        .with_panel(
            series(
                "Audit webhook requests by status",
                "reqps",
                (f"sum by (route, code) (rate(reverser_audit_requests_total[{RATE}]))", "{{route}} {{code}}"),
                stacked=True,
            )
        )
        .with_panel(
            series(
                "Audit request latency",
                "s",
                *quantiles("reverser_audit_request_duration_seconds", "", "request"),
            )
        )
        .with_row(dashboard.Row("Attribution"))
        .with_panel(
            series(
                "Attribution outcomes by tier",
                "ops",
                (f"sum by (tier) (rate(reverser_attribution_resolutions_total[{RATE}]))", "{{tier}}"),
                stacked=True,
                description="Which tier of the join named the author; `absent` means no fact matched.",
            )
        )
        .with_panel(
            series(
                "Resolution wait by tier (p95)",
                "s",
                (
                    f"histogram_quantile(0.95, sum by (le, tier) "
                    f"(rate(reverser_attribution_resolution_wait_seconds_bucket[{RATE}])))",
                    "{{tier}}",
                ),
            )
        )
        .with_panel(
            single(
                "Events without an author",
                "percentunit",
                (
                    f'sum(rate(reverser_attribution_resolutions_total{{actor_kind="none"}}[{RATE}])) '
                    f"/ sum(rate(reverser_attribution_resolutions_total[{RATE}]))"
                ),
                "unattributed",
            )
        )
        .with_panel(
            single(
                "Facts matched / published",
                "percentunit",
                (
                    f"sum(rate(reverser_attribution_facts_matched_total[{RATE}])) "
                    f"/ sum(rate(reverser_audit_facts_published_total[{RATE}]))"
                ),
                "matched",
            )
        )
        .with_panel(
            single(
                "Dead-lettered records (1h)",
                "short",
                (
                    "(sum(increase(reverser_router_dead_lettered_total[1h])) or vector(0)) "
                    "+ (sum(increase(reverser_commit_dead_lettered_total[1h])) or vector(0))"
                ),
                "dead-lettered",
            )
        )
        .with_row(dashboard.Row("Consumer lag"))
        .with_panel(
            series(
                "Lag per group (seconds)",
                "s",
                ("max by (group) (reverser_consumergroup_lag_seconds)", "{{group}}"),
            )
        )
        .with_panel(
            series(
                "Lag per group (records)",
                "short",
                ("sum by (group) (reverser_consumergroup_lag)", "{{group}}"),
            )
        )
        .with_panel(
            series(
                "Group status (1 = current)",
                "short",
                ("max by (group, status) (reverser_consumergroup_status) > 0", "{{group}} {{status}}"),
                (
                    "max by (group, topic, partition, status) (reverser_consumergroup_partition_status)",
                    "{{group}} {{topic}}[{{partition}}] {{status}}",
                ),
                description="Burrow-style status per group (OK, WARN, ERR) and partitions that are not OK.",
            )
        )
        .with_panel(
            series(
                "Records lost to retention",
                "short",
                ("sum by (group) (reverser_consumergroup_records_lost)", "{{group}}"),
            )
        )
        .with_row(dashboard.Row("Git"))
        .with_panel(
            series(
                "Push results",
                "ops",
                (f"sum by (result) (rate(reverser_commit_pushes_total[{RATE}]))", "{{result}}"),
                stacked=True,
            )
        )
        .with_panel(
            series(
                "Push latency",
                "s",
                *quantiles("reverser_commit_push_seconds", "", "push"),
            )
        )
        .with_panel(
            series(
                "Pending work per branch",
                "short",
                ("sum by (provider, branch) (reverser_commit_pending_work)", "{{provider}}/{{branch}}"),
            )
        )
        .with_panel(
            series(
                "Rebases onto a moved remote",
                "ops",
                (
                    f"sum by (provider, branch) (rate(reverser_commit_rebases_total[{RATE}]))",
                    "{{provider}}/{{branch}}",
                ),
            )
        )
        .with_row(dashboard.Row("Fact index and watch"))
        .with_panel(
            series(
                "Fact index entries",
                "short",
                ("sum by (instance) (reverser_attribution_fact_index_entries)", "{{instance}}"),
                width=THIRD_WIDTH,
            )
        )
        .with_panel(
            series(
                "Fact index ready",
                "short",
                ("min by (instance) (reverser_attribution_fact_index_ready)", "{{instance}}"),
                (
                    "sum by (instance) (reverser_attribution_replay_remaining_records)",
                    "{{instance}} replay remaining",
                ),
                width=THIRD_WIDTH,
            )
        )
        .with_panel(
            series(
                "Watch streams by state",
                "short",
                ("sum by (state) (reverser_watch_streams)", "{{state}}"),
                width=THIRD_WIDTH,
            )
        )
        .with_panel(
            series(
                "Watch reconnects and 410 Gone",
                "ops",
                (f"sum(rate(reverser_watch_reconnects_total[{RATE}]))", "reconnects"),
                (f"sum(rate(reverser_watch_gone_total[{RATE}]))", "410 Gone"),
            )
        )
        .with_panel(
            series(
                "Watch leader per cluster",
                "short",
                ("max by (cluster, instance) (reverser_watch_leader)", "{{cluster}} {{instance}}"),
            )
        )
    )


def render() -> str:
    """The dashboard JSON exactly as committed (sorted keys, two-space indent, final newline)."""
    model = build().build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number  # stable ids in layout order, so links and repeated edits keep working
    return json.dumps(json.loads(json.dumps(model, cls=JSONEncoder)), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--write"]:
        TARGET.write_text(text)
        print(f"wrote {TARGET}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
