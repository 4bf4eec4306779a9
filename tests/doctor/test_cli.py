"""`reverser doctor` end to end on the embedded log and a file Git remote, and `--audit-setup`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.config import Settings
from pipeline.log import open_log
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, stream_key
from tests.doctor.test_git_checks import seeded_remote


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def write_config(tmp_path: Path, data: dict[str, object]) -> str:
    path = tmp_path / "reverser.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


async def prepare_log(settings: Settings, *, with_fact: bool) -> None:
    log = open_log(settings)
    await log.start()
    try:
        await log.create_topics(topic_specs(settings))
        if with_fact:
            topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
            await log.append(topic, b"fact", key=stream_key("default", GroupResource("", "configmaps")))
    finally:
        await log.close()


def config_data(tmp_path: Path, remote: Path) -> dict[str, object]:
    return {
        "workdir": str(tmp_path / "work"),
        "log": {"backend": "embedded"},
        "providers": [{"name": "git", "url": str(remote)}],
        "targets": [{"name": "t", "provider": "git"}],
    }


@pytest.mark.parametrize("with_fact", [True, False])
def test_doctor_passes_a_healthy_setup_and_fails_a_silent_audit_route(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_fact: bool
) -> None:
    data = config_data(tmp_path, seeded_remote(tmp_path / "remote.git"))
    config = write_config(tmp_path, data)
    asyncio.run(prepare_log(Settings.model_validate(data), with_fact=with_fact))
    code, out = run(capsys, "doctor", "--config", config)
    lines = out.splitlines()
    assert lines[0].split() == ["AREA", "SUBJECT", "CHECK", "STATUS", "DETAIL"]
    if with_fact:
        assert code == 0, out
        assert lines[-1].endswith("checks, all passed")
    else:
        assert code == 1
        assert lines[-1].endswith("checks, 1 failed")
        fix = "FAIL audit/default facts arriving: point the apiserver"
        assert any(line.startswith(fix) for line in lines)


def test_invalid_configuration_is_one_failed_check_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"attribution": {"grace_ms": -1}})
    code, out = run(capsys, "doctor", "--config", config, "--output", "json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False
    (check,) = report["checks"]
    assert (check["area"], check["status"]) == ("config", "fail")
    assert "attribution.grace_ms" in check["detail"]


def test_audit_setup_prints_policy_kubeconfig_and_flags_per_route(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        {
            "attribution": {"grace_ms": 1500},
            "audit": {
                "routes": [
                    {"name": "prod-eu-1", "allowed_identities": ["kube-apiserver-prod-eu-1"]},
                    {"name": "lab", "bearer_tokens_env": ["AUDIT_TOKEN_LAB"]},
                ]
            },
            "clusters": [{"name": "eu", "audit_route": "prod-eu-1", "kubeconfig": "/dev/null"}],
        },
    )
    code, out = run(
        capsys,
        "doctor",
        "--config",
        config,
        "--audit-setup",
        "--output",
        "json",
        "--audit-url",
        "https://rp-audit.reverser.svc:443",
    )
    assert code == 0
    setup = json.loads(out)
    policy = yaml.safe_load(setup["policy"])
    assert policy["kind"] == "Policy"
    writes = [r for r in policy["rules"] if r["level"] == "RequestResponse"]
    assert writes == [
        {"level": "RequestResponse", "verbs": ["create", "update", "patch", "delete", "deletecollection"]}
    ]
    routes = {r["route"]: r for r in setup["routes"]}
    prod = yaml.safe_load(routes["prod-eu-1"]["kubeconfig"])
    assert (
        prod["clusters"][0]["cluster"]["server"]
        == "https://rp-audit.reverser.svc:443/audit-webhook/prod-eu-1"
    )
    assert "client-certificate" in prod["users"][0]["user"]
    assert "kube-apiserver-prod-eu-1" in routes["prod-eu-1"]["kubeconfig"]
    lab = yaml.safe_load(routes["lab"]["kubeconfig"])
    assert lab["users"][0]["user"] == {"token": "<the value of AUDIT_TOKEN_LAB>"}
    assert "--audit-webhook-batch-max-wait=0.5s" in routes["lab"]["flags"]
    assert "--audit-webhook-initial-backoff=1s" in routes["lab"]["flags"]
    assert f"--audit-webhook-config-file={routes['lab']['kubeconfig_path']}" in routes["lab"]["flags"]

    code, out = run(
        capsys,
        "doctor",
        "--config",
        config,
        "--audit-setup",
        "--audit-url",
        "https://rp-audit.reverser.svc:443",
    )
    assert code == 0
    heading = (
        "route prod-eu-1 (cluster eu), posts to https://rp-audit.reverser.svc:443/audit-webhook/prod-eu-1"
    )
    assert heading in out
