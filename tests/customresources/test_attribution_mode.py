"""A GitTarget's attribution mode: gitops-reverser's `attribution.enabled` and this project's spelling.

The upstream GitTarget of these tests lives in a tenant namespace, so each spelling also passes
the tenant boundary (the mode names no identity: the provider's committer authors).
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from pipeline.authormode import AttributionMode
from pipeline.customresources.compile import compile_resources
from pipeline.customresources.objects import Kind
from pipeline.customresources.status import Observed, StatusWriter, object_status
from pipeline.kube.client import KubeClient
from pipeline.router.component import destinations
from tests.customresources.test_compile import HOME, TENANTS, _edited


def _target_errors(path: str, value: Any) -> list[tuple[str, str]]:
    compiled = compile_resources(_edited(path, value), home_namespace=HOME, base=TENANTS)
    return [(e.path, e.message) for ref, e in compiled.errors if ref.kind is Kind.GIT_TARGET]


def _mode(path: str, value: Any) -> AttributionMode:
    compiled = compile_resources(_edited(path, value), home_namespace=HOME, base=TENANTS)
    settings = compiled.settings(TENANTS)
    return destinations(settings)["team-a/apps"].attribution


@pytest.mark.parametrize(
    ("path", "value", "mode"),
    [
        ("GitTarget.spec.attribution", {"enabled": False}, AttributionMode.CONFIGURED_AUTHOR),
        ("GitTarget.spec.attribution", {"enabled": True}, AttributionMode.AUDIT),
        ("GitTarget.spec.pipeline", {"attribution": "configured-author"}, AttributionMode.CONFIGURED_AUTHOR),
        ("GitTarget.spec.pipeline", {"attribution": "audit"}, AttributionMode.AUDIT),
    ],
)
def test_both_spellings_compile_to_the_mode_for_a_tenant_target(
    path: str, value: Any, mode: AttributionMode
) -> None:
    assert _target_errors(path, value) == []
    assert _mode(path, value) is mode


def test_a_target_that_sets_no_mode_keeps_its_cluster_default() -> None:
    assert _mode("GitTarget.spec.path", "team-a/apps") is AttributionMode.AUDIT


def test_the_upstream_switch_is_not_reported_unsupported() -> None:
    compiled = compile_resources(
        _edited("GitTarget.spec.attribution", {"enabled": False}), home_namespace=HOME, base=TENANTS
    )
    unsupported = [
        u for ref, r in compiled.reports.items() if ref.kind is Kind.GIT_TARGET for u in r.unsupported
    ]
    assert not [u for u in unsupported if u.startswith("spec.attribution")]


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("GitTarget.spec.attribution", {"enabled": "no"}, "spec.attribution.enabled", "true or false"),
        ("GitTarget.spec.pipeline", {"attribution": "nobody"}, "spec.pipeline.attribution", "must be one of"),
    ],
)
def test_a_mode_that_is_not_one_is_an_error_naming_its_field(
    path: str, value: Any, field: str, words: str
) -> None:
    errors = _target_errors(path, value)
    assert [where for where, _ in errors] == [field]
    assert words in errors[0][1]


def test_both_spellings_at_once_are_an_error_naming_both() -> None:
    documents = _edited("GitTarget.spec.pipeline", {"attribution": "audit"})
    target = next(d for d in documents if d.ref.kind is Kind.GIT_TARGET)
    target.spec["attribution"] = {"enabled": False}
    compiled = compile_resources(documents, home_namespace=HOME, base=TENANTS)
    errors = [e for ref, e in compiled.errors if ref.kind is Kind.GIT_TARGET]
    assert [e.path for e in errors] == ["spec.pipeline.attribution"]
    assert "spec.attribution.enabled" in errors[0].message


def test_a_target_status_shows_its_effective_mode() -> None:
    compiled = compile_resources(
        _edited("GitTarget.spec.attribution", {"enabled": False}), home_namespace=HOME, base=TENANTS
    )
    report = next(rep for r, rep in compiled.reports.items() if r.kind is Kind.GIT_TARGET)
    mode = TENANTS.attribution_mode(compiled.targets[0])
    status = object_status(report, None, attribution=mode)
    assert status["attributionMode"] == "configured-author"
    assert "attributionMode" not in object_status(report, None)


async def test_the_status_writer_patches_each_target_with_its_mode() -> None:
    compiled = compile_resources(
        _edited("GitTarget.spec.pipeline", {"attribution": "configured-author"}),
        home_namespace=HOME,
        base=TENANTS,
    )
    client = RecordingClient()
    writer = StatusWriter(cast(KubeClient, client))
    modes = {t.name: TENANTS.attribution_mode(t) for t in compiled.targets}
    await writer.write(compiled, {}, HOME, Observed(modes=modes))
    statuses = {tuple(path.split("/")[-3:-1]): body["status"] for path, body in client.patches}
    assert statuses["gittargets", "apps"]["attributionMode"] == "configured-author"
    others = [status for (kind, _), status in statuses.items() if kind != "gittargets"]
    assert others
    assert all("attributionMode" not in status for status in others)


class RecordingClient:
    """Records the status patches a StatusWriter sends."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def send_json(self, method: str, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert method == "PATCH"
        self.patches.append((path, body))
        return {}
