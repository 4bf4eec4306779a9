"""SIGHUP takes the live settings through the apply path and names (and counts) the rest.

The pure rules (`pipeline/service/reload.py`) without I/O, then a running service with the real
audit ingress on an embedded log: a reload that adds a watched type changes which facts the
ingress keeps from the next request on, while the changed listener, metrics address and
attribution settings are logged as needing a restart, counted, and not applied.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client import REGISTRY
from pydantic import SecretStr

from pipeline.audit.component import build as build_audit
from pipeline.audit.server import AuditIngress
from pipeline.config import (
    ClusterSettings,
    ConfigError,
    CustomResourceSettings,
    LogSettings,
    SaslSettings,
    Settings,
    load_settings,
)
from pipeline.log.api import Log
from pipeline.models import GroupResource
from pipeline.service.app import Service
from pipeline.service.reload import restart_only_changes, take_live
from tests.audit.conftest import Running, read_batches
from tests.audit.corpus import event_list
from tests.audit.test_server import post, write
from tests.service.test_reload import Taker
from tests.support.net import free_port


def _ignored(setting: str) -> float:
    return REGISTRY.get_sample_value("reverser_config_reload_ignored_total", {"setting": setting}) or 0.0


# pure rules -------------------------------------------------------------------------------------


def test_live_settings_are_not_named_and_the_rest_is_by_field() -> None:
    running = Settings(clusters=[ClusterSettings(name="a")])
    fresh = running.model_copy(
        update={
            "clusters": [ClusterSettings(name="a", watch_timeout_s=60), ClusterSettings(name="b")],
            "audit": running.audit.model_copy(update={"addr": "0.0.0.0:9999"}),
            "metrics": running.metrics.model_copy(update={"addr": "127.0.0.1:1"}),
            "workdir": Path("/elsewhere"),
        }
    )
    assert restart_only_changes(running, fresh) == ["audit.addr", "metrics.addr", "workdir"]
    assert restart_only_changes(running, running) == []


def test_a_changed_secret_is_named_never_shown() -> None:
    running = Settings(log=LogSettings(sasl=SaslSettings(username="u", password=SecretStr("one"))))
    fresh = Settings(log=LogSettings(sasl=SaslSettings(username="u", password=SecretStr("two"))))
    assert restart_only_changes(running, fresh) == ["log.sasl.password"]


def test_take_live_keeps_the_running_rest_and_checks_the_whole() -> None:
    running = Settings(clusters=[ClusterSettings(name="a")])
    fresh = Settings(
        clusters=[ClusterSettings(name="a"), ClusterSettings(name="b")],
        audit=running.audit.model_copy(update={"addr": "127.0.0.1:1"}),
    )
    taken = take_live(running, fresh)
    assert [c.name for c in taken.clusters] == ["a", "b"]
    assert taken.audit == running.audit
    # the running custom-resource cluster is gone from the fresh clusters: refused, naming it
    resources = Settings(
        clusters=[ClusterSettings(name="a"), ClusterSettings(name="b")],
        custom_resources=CustomResourceSettings(enabled=True, cluster="a"),
    )
    elsewhere = Settings(
        clusters=[ClusterSettings(name="b")],
        custom_resources=CustomResourceSettings(enabled=True, cluster="b"),
    )
    edited = resources.model_copy(
        update={"clusters": [ClusterSettings(name="a", watch_timeout_s=60), ClusterSettings(name="b")]}
    )
    assert restart_only_changes(resources, edited) == ["clusters.a (the custom-resources cluster)"]
    with pytest.raises(ConfigError, match=r"custom_resources\.cluster: unknown cluster 'a'"):
        take_live(resources, elsewhere)


# a running service ------------------------------------------------------------------------------


def _config(tmp_path: Path, audit_port: int, resources: list[str], grace_ms: int) -> dict[str, Any]:
    return {
        "workdir": str(tmp_path / "work"),
        "log": {"backend": "embedded", "fsync": False},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"addr": f"127.0.0.1:{audit_port}", "allow_plain_http": True},
        "attribution": {"grace_ms": grace_ms},
        "clusters": [{"name": "prod", "audit_route": "default"}],
        "providers": [{"name": "p", "url": "/srv/none.git"}],
        "targets": [
            {
                "name": "t",
                "provider": "p",
                "cluster": "prod",
                "rules": [{"resources": resources, "namespaces": ["ns"]}],
            }
        ],
        "lag": {"enabled": False},
    }


async def test_reload_applies_live_settings_and_names_the_ones_needing_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    port = free_port()
    path.write_text(yaml.safe_dump(_config(tmp_path, port, ["configmaps"], 100)))
    taker = Taker()

    def build_taker(_s: Settings, _l: Log) -> Taker:
        return taker

    service = Service(
        load_settings(path, environ={}),
        factories=[build_audit, build_taker],
        reload=lambda: load_settings(path, environ={}),
    )
    await service.start()
    try:
        (ingress,) = [c for c in service.components if isinstance(c, AuditIngress)]
        running = Running(ingress, service.log, service.settings)
        async with aiohttp.ClientSession() as http:
            status, _ = await post(
                http, running, event_list([write("d1", resource="deployments", group="apps")])
            )
            assert status == 200
            assert await read_batches(running) == []  # not watched yet: dropped

            before = {s: _ignored(s) for s in ("audit.addr", "metrics.addr", "attribution.grace_ms")}
            metrics_addr = service.settings.metrics.addr
            changed = _config(tmp_path, free_port(), ["configmaps", "apps/deployments"], 500)
            path.write_text(yaml.safe_dump(changed))
            with caplog.at_level(logging.WARNING, logger="pipeline.service.app"):
                await service.reload()
            assert {s: _ignored(s) - n for s, n in before.items()} == {
                "audit.addr": 1,
                "attribution.grace_ms": 1,
                "metrics.addr": 1,
            }
            assert (
                "not applied, these settings take effect only after a restart: "
                "attribution.grace_ms, audit.addr, metrics.addr"
            ) in caplog.text
            # the running values stay; the live ones are taken
            assert service.settings.audit.addr == f"127.0.0.1:{port}"
            assert service.settings.metrics.addr == metrics_addr
            assert service.settings.attribution.grace_ms == 100
            assert service.settings.targets[0].rules[0].resources == ["configmaps", "apps/deployments"]
            assert taker.applied == [["t"]]

            # the ingress, still on its port, keeps the newly watched type's facts
            status, _ = await post(
                http, running, event_list([write("d2", resource="deployments", group="apps")])
            )
            assert status == 200
            batches = [batch for _, batch in await read_batches(running)]
            assert [(b.group_resource, [f.name for f in b.facts]) for b in batches] == [
                (GroupResource("apps", "deployments"), ["d2"])
            ]

            # the same file again: the change still waits for a restart, named again
            await service.reload()
            assert _ignored("audit.addr") - before["audit.addr"] == 2
    finally:
        await service.stop()
