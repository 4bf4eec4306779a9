"""`reverser config check` and `reverser config export` as a user runs them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from tests.customresources.test_compile import GRANT, SAMPLE, UPSTREAM


def test_export_then_check_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(SAMPLE)
    assert main(["config", "export", "--config", str(config), "--namespace", "platform"]) == 0
    exported = capsys.readouterr().out
    kinds = [d["kind"] for d in yaml.safe_load_all(exported)]
    assert kinds.count("GitProvider") == 2
    assert kinds.count("GitTarget") == 3
    resources = tmp_path / "resources.yaml"
    resources.write_text(exported)
    assert main(["config", "check", str(resources), "--config", str(config), "--namespace", "platform"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "GitTarget platform/prod-apps: ok" in lines
    assert all(line.endswith(": ok") for line in lines)


def _granting(tmp_path: Path) -> Path:
    """A configuration whose custom_resources.tenants lets team-a use its own repository folder."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"custom_resources": {"tenants": [GRANT]}}))
    return config


def test_check_reads_standard_input_and_reports_errors_and_unsupported_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = UPSTREAM.replace("branch: feature/x", "branch: release")
    monkeypatch.setattr("sys.stdin", io.StringIO(broken))
    assert main(["config", "check", "-", "--config", str(_granting(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert (
        "GitTarget team-a/apps: error: spec.branch: branch 'release' is not in spec.allowedBranches "
        "of GitProvider team-a/repo"
    ) in out
    assert "GitProvider team-a/repo: ok" in out
    assert "WatchRule team-a/apps: error: spec.targetRef.name: no valid GitTarget team-a/apps" in out


def test_check_names_unreadable_documents_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["config", "check", str(path)]) == 1
    assert "document 0: apiVersion: expected configbutler.ai/v1alpha3, got 'v1'" in capsys.readouterr().out
    assert main(["config", "check", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    path.write_text("a: [")
    assert main(["config", "check", str(path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    listed = tmp_path / "list.yaml"
    listed.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(yaml.safe_load_all(UPSTREAM))})
    )
    assert main(["config", "check", str(listed), "--config", str(_granting(tmp_path))]) == 0
    assert (
        "GitTarget team-a/apps: unsupported (accepted, not acted on): spec.syncPolicy.retry"
        in capsys.readouterr().out
    )


def test_export_names_what_it_cannot_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(SAMPLE.replace("name: staging", "name: Staging_Env"))
    assert main(["config", "export", "--config", str(config)]) == 2
    assert "target 'Staging_Env'" in capsys.readouterr().err


SAMPLES = Path(__file__).parent / "gr_samples"


@pytest.mark.parametrize(
    ("sample", "lines"),
    [
        (
            "clusterprovider.yaml",
            [
                "ClusterProvider default: ok",
                # its kubeConfig Secret makes prod-eu-1 a remote cluster (clusterconnection.py)
                "ClusterProvider prod-eu-1: ok",
            ],
        ),
        ("commitrequest.yaml", ["CommitRequest default/save-: ok"]),
    ],
)
def test_gitops_reversers_samples_check_clean(
    sample: str, lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "check", str(SAMPLES / sample)]) == 0
    assert capsys.readouterr().out.splitlines() == lines


def test_check_names_a_commit_requests_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    text = (
        (SAMPLES / "commitrequest.yaml").read_text().replace("closeDelaySeconds: 2", "closeDelaySeconds: 900")
    )
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "CommitRequest default/save-: error: spec.closeDelaySeconds: must be an integer 0-300" in out
