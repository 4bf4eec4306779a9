"""`reverser doctor` names each cluster's and target's attribution mode, and warns where the audit
mode can only end unresolved (no audit route is served for the target's cluster)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.doctor.attribution_checks import check_attribution
from pipeline.doctor.report import Check, Status
from tests.doctor.test_cli import config_data, prepare_log, run, write_config
from tests.doctor.test_git_checks import seeded_remote

PROVIDER = {
    "name": "git",
    "url": "https://git.example.com/r.git",
    "committer": {"name": "Ops", "email": "ops@x.io"},
}


def _rows(checks: list[Check]) -> dict[tuple[str, str], Check]:
    return {(c.subject, c.check): c for c in checks}


def test_each_cluster_and_target_shows_its_mode_and_where_it_comes_from() -> None:
    settings = Settings.model_validate(
        {
            "clusters": [{"name": "eks", "attribution": "configured-author"}, {"name": "default"}],
            "providers": [PROVIDER],
            "targets": [
                {"name": "managed", "provider": "git", "path": "a", "cluster": "eks"},
                {"name": "onprem", "provider": "git", "path": "b", "cluster": "default"},
            ],
        }
    )
    rows = _rows(check_attribution(settings))
    assert rows["eks", "default mode"].detail.startswith("configured-author")
    assert rows["default", "default mode"].detail.startswith("audit")
    managed = rows["managed", "mode"]
    assert managed.status is Status.INFO
    assert managed.detail == (
        "configured-author: every commit is authored by Ops <ops@x.io>, at once (its cluster's)"
    )
    onprem = rows["onprem", "mode"]
    assert (onprem.status, onprem.detail) == (
        Status.INFO,
        "audit: the facts of audit route default name each author (its cluster's)",
    )


def test_audit_mode_on_a_route_no_ingress_serves_warns_with_the_mode_as_a_fix() -> None:
    settings = Settings.model_validate(
        {
            "clusters": [{"name": "gke"}],
            "providers": [PROVIDER],
            "targets": [{"name": "t", "provider": "git", "cluster": "gke"}],
        }
    )
    row = _rows(check_attribution(settings))["t", "mode"]
    assert row.status is Status.WARN
    assert "no audit route gke is served" in row.detail
    assert "attribution: configured-author on cluster gke" in row.fix
    overridden = settings.model_copy(
        update={"targets": [settings.targets[0].model_copy(update={"attribution": "configured-author"})]}
    )
    row = _rows(check_attribution(overridden))["t", "mode"]
    assert (row.status, row.detail.endswith("(set on the target)")) == (Status.INFO, True)


def test_doctor_prints_the_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = config_data(tmp_path, seeded_remote(tmp_path / "remote.git"))
    data["targets"] = [{"name": "t", "provider": "git", "attribution": "configured-author"}]
    config = write_config(tmp_path, data)
    asyncio.run(prepare_log(Settings.model_validate(data), with_fact=True))
    code, out = run(capsys, "doctor", "--config", config, "--output", "json")
    assert code == 0, out
    (row,) = [c for c in json.loads(out)["checks"] if c["area"] == "attribution"]
    assert row["subject"] == "t"
    assert row["detail"].startswith("configured-author: every commit is authored by Reverser Pipeline")


def test_a_clusters_mode_from_its_audit_route_says_so() -> None:
    settings = Settings.model_validate(
        {
            "audit": {"routes": [{"name": "managed", "attribution": "configured-author"}]},
            "clusters": [
                {"name": "eks", "audit_route": "managed"},
                {"name": "pinned", "audit_route": "managed", "attribution": "audit"},
                {"name": "default"},
            ],
            "providers": [PROVIDER],
            "targets": [{"name": "managed", "provider": "git", "path": "a", "cluster": "eks"}],
        }
    )
    rows = _rows(check_attribution(settings))
    assert rows["eks", "default mode"].detail.startswith("configured-author (its audit route managed's;")
    assert rows["pinned", "default mode"].detail.startswith("audit (set on the cluster;")
    assert rows["default", "default mode"].detail.startswith("audit (the default;")
    assert rows["managed", "mode"].detail.startswith("configured-author: every commit is authored by Ops")
