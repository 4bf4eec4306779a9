"""Which TargetDeleted work a new configuration version implies (pure: no log, no Git)."""

from __future__ import annotations

from typing import Any

from pipeline.codec.branch_work import TargetDeleted, work_record
from pipeline.config import Settings
from pipeline.customresources.compile import CompiledConfig, compile_resources
from pipeline.customresources.objects import parse_object
from pipeline.customresources.retire import deleted_targets
from pipeline.models import branch_key

HOME = "reverser"
API = "configbutler.ai/v1alpha3"
URL = "https://git.example.com/live.git"
# team-a may use any repository of git.example.com, anywhere in it
GRANT = {"namespaces": ["team-a"], "url_prefixes": ["https://git.example.com/"], "path_prefixes": ["."]}
TENANTS = Settings(custom_resources={"tenants": [GRANT]})


def _obj(kind: str, name: str, spec: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _provider(url: str = URL) -> dict[str, Any]:
    return _obj("GitProvider", "repo", {"url": url, "allowedBranches": ["main", "release"]})


def _target(name: str, path: str, prune: str | None = None, branch: str = "main") -> dict[str, Any]:
    spec: dict[str, Any] = {"providerRef": {"name": "repo"}, "branch": branch, "path": path}
    if prune is not None:
        spec["prune"] = {"mode": prune}
    return _obj("GitTarget", name, spec)


def _compiled(*documents: dict[str, Any]) -> CompiledConfig:
    return compile_resources([parse_object(d) for d in documents], home_namespace=HOME, base=TENANTS)


def _bodies(before: CompiledConfig, after: CompiledConfig) -> dict[str, TargetDeleted]:
    items = deleted_targets(before, after, 7, Settings(), home_namespace=HOME, observed_at_ms=1234)
    found: dict[str, TargetDeleted] = {}
    for item in items:
        assert isinstance(item.body, TargetDeleted)
        found[item.stream.target] = item.body
    return found


def test_each_prune_mode_decides_whether_the_files_go() -> None:
    before = _compiled(
        _provider(),
        _target("always", "a", "always"),
        _target("on-event", "b", "onEvent"),
        _target("never", "c", "Never"),
        _target("default", "d"),
        _target("stays", "e", "Always"),
    )
    after = _compiled(_provider(), _target("stays", "e", "Always"))
    bodies = _bodies(before, after)
    assert {name: body.remove_files for name, body in bodies.items()} == {
        "team-a/always": True,
        "team-a/on-event": False,
        "team-a/never": False,
        "team-a/default": False,
    }
    assert bodies["team-a/always"].prune == "Always"
    assert bodies["team-a/default"].prune == "OnEvent"
    assert bodies["team-a/always"].config_version == 7
    assert bodies["team-a/always"].reason == "GitTarget team-a/always was deleted (configuration version 7)"


def test_the_work_is_keyed_to_the_targets_own_branch_and_folder() -> None:
    before = _compiled(_provider(), _target("rel", "apps/", "Always", branch="release"))
    items = deleted_targets(
        before, _compiled(_provider()), 2, Settings(), home_namespace=HOME, observed_at_ms=9
    )
    assert len(items) == 1
    item = items[0]
    assert (item.provider, item.branch, item.stream.target, item.path) == (
        "team-a/repo",
        "release",
        "team-a/rel",
        "apps/",
    )
    assert item.observed_at_ms == 9


def test_an_invalid_target_keeps_its_files() -> None:
    """A GitTarget edited into an invalid one leaves the configuration, but it was not deleted."""
    before = _compiled(_provider(), _target("apps", "apps", "Always"))
    after = _compiled(_provider(), _target("apps", "apps", "Always", branch="not-allowed"))
    assert after.targets == []
    assert _bodies(before, after) == {}


def test_a_target_whose_provider_is_gone_too_gets_nothing() -> None:
    before = _compiled(_provider(), _target("apps", "apps", "Always"))
    assert _bodies(before, _compiled()) == {}


def test_a_folder_another_target_now_writes_is_kept() -> None:
    """Deleted and re-created under another name in one change: the folder is the new target's."""
    before = _compiled(_provider(), _target("old", "apps", "Always"), _target("side", "side", "Always"))
    after = _compiled(_provider(), _target("new", "apps/inner", "Always"))
    bodies = _bodies(before, after)
    assert bodies["team-a/old"].remove_files is False
    assert "another target now writes its folder" in bodies["team-a/old"].reason
    assert bodies["team-a/side"].remove_files is True


def test_the_same_folder_on_another_branch_or_repository_does_not_count() -> None:
    other_repo = _obj(
        "GitProvider", "other", {"url": "https://git.example.com/other.git", "allowedBranches": ["main"]}
    )
    before = _compiled(_provider(), _target("old", "apps", "Always"))
    after = _compiled(
        _provider(),
        other_repo,
        _target("rel", "apps", "Always", branch="release"),
        _obj("GitTarget", "elsewhere", {"providerRef": {"name": "other"}, "branch": "main", "path": "apps"}),
    )
    assert _bodies(before, after)["team-a/old"].remove_files is True


def test_nothing_deleted_means_no_work() -> None:
    same = _compiled(_provider(), _target("apps", "apps", "Always"))
    assert _bodies(same, same) == {}
    assert _bodies(_compiled(), same) == {}


def test_the_record_lands_on_the_branchs_partition_key() -> None:
    before = _compiled(_provider(), _target("apps", "apps", "Always"))
    (item,) = deleted_targets(
        before, _compiled(_provider()), 3, Settings(), home_namespace=HOME, observed_at_ms=0
    )
    assert work_record(item).key == branch_key("team-a/repo", "main")
