"""`reverser watch-rules` as a real process against the watch-protocol test server."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import yaml

from tests.watch.kube_server import FakeKubeApiServer


async def run_cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pipeline.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def write_config(path: Path, kubeconfig: Path, resources: list[str]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "src", "kubeconfig": str(kubeconfig)}],
                "providers": [{"name": "git", "url": "file:///dev/null"}],
                "targets": [
                    {
                        "name": "t1",
                        "provider": "git",
                        "cluster": "src",
                        "rules": [{"resources": resources, "namespaces": ["team-a"]}],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    return path


async def test_watch_rules_lists_streams_and_problems(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.yaml", kube.kubeconfig(tmp_path), ["configmaps", "secrets", "widgets"]
    )
    code, out, _ = await run_cli("watch-rules", "--config", str(config), "-o", "json")
    assert code == 1
    report = json.loads(out)
    code, out, _ = await run_cli("watch-rules", "--config", str(config), "-o", "yaml")
    assert code == 1
    assert yaml.safe_load(out) == report
    assert [(s["resource"], s["scope"]) for s in report["streams"]] == [("configmaps", "team-a")]
    assert {p["resource"]: p["reason"] for p in report["problems"]} == {
        "secrets": "SecretExcluded",
        "widgets": "Ambiguous",
    }
    clean = write_config(tmp_path / "ok.yaml", kube.kubeconfig(tmp_path), ["configmaps", "apps/deployments"])
    code, out, _ = await run_cli("watch-rules", "--config", str(clean))
    assert code == 0
    assert "apps/v1/deployments" in out


async def test_watch_rules_rejects_an_invalid_rule(tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.yaml", tmp_path / "none", ["apps/v1/deployments"])
    code, _, err = await run_cli("watch-rules", "--config", str(config))
    assert code == 2
    assert "targets.0.rules.0.resources.0" in err
