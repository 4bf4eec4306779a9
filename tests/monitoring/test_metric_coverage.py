"""Every metric the alert rules and the dashboard query is exported by a running service.

A rule or panel on a metric that does not exist stays silent or empty forever, which looks exactly
like a healthy pipeline; this test starts a real `reverser run` (embedded defaults) and scrapes it.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.monitoring.promtool import DASHBOARD, RULES
from tests.support.net import free_port
from tests.support.wait import wait_for

METRIC = re.compile(r"\b(reverser_[a-z0-9_]+|kafka_consumergroup_[a-z0-9_]+)\b")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}


def queried_by_rules() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {name for group in groups for rule in group["rules"] for name in METRIC.findall(rule["expr"])}


def queried_by_dashboard() -> set[str]:
    def exprs(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    yield value
                else:
                    yield from exprs(value)
        elif isinstance(node, list):
            for item in node:
                yield from exprs(item)

    return {name for expr in exprs(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(expr)}


def exported_names(text: str) -> set[str]:
    """Every series name the exposition can produce, labelled families without children included."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> str:
    workdir = tmp_path_factory.mktemp("coverage")
    metrics_port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "run",
            "--workdir",
            str(workdir),
            "--audit-addr",
            f"127.0.0.1:{free_port()}",
            "--metrics-addr",
            f"127.0.0.1:{metrics_port}",
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{metrics_port}"
    body: list[str] = []

    def ready() -> bool:
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(f"reverser run exited {process.returncode}: {stderr}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                if response.status != 200:
                    return False
            with urllib.request.urlopen(f"{url}/metrics", timeout=2) as response:
                body.append(response.read().decode())
            return True
        except OSError:
            return False

    try:
        asyncio.run(wait_for(ready, "reverser run to be ready", timeout_s=60, interval_s=0.2))
    finally:
        process.terminate()
        process.wait(timeout=30)
    return body[-1]


def test_rules_and_dashboard_query_metrics(scraped: str) -> None:
    assert len(queried_by_rules()) >= 10
    assert len(queried_by_dashboard()) >= 20


def test_every_alert_metric_is_exported(scraped: str) -> None:
    assert sorted(queried_by_rules() - exported_names(scraped)) == []


def test_every_dashboard_metric_is_exported(scraped: str) -> None:
    assert sorted(queried_by_dashboard() - exported_names(scraped)) == []


def test_a_metric_the_service_does_not_export_is_caught(scraped: str) -> None:
    assert "reverser_no_such_metric_total" not in exported_names(scraped)
