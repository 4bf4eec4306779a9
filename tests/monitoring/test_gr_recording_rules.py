"""The recording rules that publish our metrics under gitops-reverser's names, checked by promtool.

promtool (`make promtool`, built from the Go module proxy) checks the rules and runs their unit
tests: each gitopsreverser_* series is computed from reverser_* input series as a GR dashboard
queries it. Every record names a metric GR exports, and every reverser_* metric it reads is one
the service exports (a rule on a missing metric records nothing, forever).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.monitoring.promtool import BUILD_PROMTOOL, promtool_path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "monitoring" / "gitops-reverser-recording-rules.yaml"
TESTS = Path(__file__).resolve().parent / "gitops-reverser-recording-rules.test.yaml"
DOC = ROOT / "docs" / "gitops-reverser-metrics.md"
# gitops-reverser's exported metrics (its internal/telemetry exporter), which a record may name
GR_METRICS = {
    "gitopsreverser_events_received_total",
    "gitopsreverser_events_processed_total",
    "gitopsreverser_git_operations_total",
    "gitopsreverser_objects_scanned_total",
    "gitopsreverser_objects_written_total",
    "gitopsreverser_files_deleted_total",
    "gitopsreverser_commits_total",
    "gitopsreverser_commit_bytes_total",
    "gitopsreverser_rebase_retries_total",
    "gitopsreverser_ownership_conflicts_total",
    "gitopsreverser_lease_acquire_failures_total",
    "gitopsreverser_marker_conflicts_total",
    "gitopsreverser_webhook_correlations_total",
    "gitopsreverser_enrich_hits_total",
    "gitopsreverser_enrich_misses_total",
    "gitopsreverser_kv_evictions_total",
    "gitopsreverser_watch_duplicates_skipped_total",
    "gitopsreverser_audit_events_received_total",
    "gitopsreverser_secret_encryption_attempts_total",
    "gitopsreverser_secret_encryption_success_total",
    "gitopsreverser_secret_encryption_failures_total",
    "gitopsreverser_secret_encryption_cache_hits_total",
    "gitopsreverser_secret_encryption_marker_skips_total",
    "gitopsreverser_git_push_duration_seconds",
    "gitopsreverser_git_commit_queue_size",
    "gitopsreverser_repo_branch_active_workers",
    "gitopsreverser_repo_branch_queue_depth",
}


@pytest.fixture(scope="session")
def promtool() -> Path:
    path = promtool_path()
    if path is None:
        pytest.skip(f"promtool is not built; run {BUILD_PROMTOOL} (Go module proxy) or `make promtool`")
    return path


def _records() -> list[dict[str, str]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_recording_rules(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_records())} rules found" in result.stdout + result.stderr


def test_the_recorded_series_are_what_a_gr_dashboard_reads(promtool: Path) -> None:
    result = subprocess.run(
        [str(promtool), "test", "rules", str(TESTS)], capture_output=True, text=True, cwd=TESTS.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_record_is_a_gr_metric_tested_and_in_the_table() -> None:
    tested = TESTS.read_text()
    table = DOC.read_text()
    for rule in _records():
        name = rule["record"]
        assert re.sub(r"_(bucket|sum|count)$", "", name) in GR_METRICS, name
        assert name in tested, f"{name} has no promtool test"
        assert f"`{re.sub(r'_(bucket|sum|count)$', '', name)}`" in table, f"{name} is not in {DOC.name}"
