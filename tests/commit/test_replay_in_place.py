"""`reverser replay branch` over a branch whose history holds in-place edits (issue 29).

The live run pushes a user's layout (a commented multi-document file, a kustomization folder) as a
foreign user, runs live changes of its objects through the commit worker on a real log, and then
rebuilds the branch from object-state and from history: the user's files stay byte for byte as the
live commits left them, and no canonical copy appears beside them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pipeline.commit.replay_cli import ReplayRequest, Source, replay_branch
from pipeline.config import LogSettings, ProviderSettings, Settings, TargetSettings
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, files, foreign_push, log_lines
from tests.commit.logwork import commit_items
from tests.commit.test_in_place import FEATURES_DOC, MULTI, MULTI_PATH, SETTINGS_DOC
from tests.conftest import unique_prefix

SHOP_KUSTOMIZATION = """\
# the shop's config, applied by Argo CD
namespace: team-a
resources:
  - settings.yaml
"""
SHOP_SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-settings
  labels:
    team: shop
data:
  currency: EUR # never changes
"""
LAYOUT = {
    MULTI_PATH: MULTI,
    "live/shop/kustomization.yaml": SHOP_KUSTOMIZATION,
    "live/shop/settings.yaml": SHOP_SETTINGS,
}


def _settings(tmp_path: Path, remote: Path) -> Settings:
    return Settings(
        workdir=tmp_path / "work",
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        providers=[ProviderSettings(name="git", url=str(remote), commit_window_s=0.3, push_cooldown_s=0.1)],
        targets=[TargetSettings(name="t1", provider="git", path="live", prune="OnEvent")],
    )


async def _live_run(cfg: Settings) -> None:
    """Live changes of the user's objects, and one new object, through the commit worker."""
    w = Work(step_ms=200)
    items = [
        w.update(cm("app-settings", level="debug", region="eu-1"), ALICE, rv="2"),
        w.update(cm("features", beta="true"), BOB, rv="3"),
        w.update(cm("shop-settings", currency="CHF"), ALICE, rv="4"),
        w.create(cm("fresh", colour="blue"), BOB, rv="5"),
        w.update(cm("app-settings", level="warn", region="eu-1"), BOB, rv="6"),
    ]
    await commit_items(cfg, items)


def _user_files(tree: dict[str, str]) -> dict[str, str]:
    return {path: data for path, data in tree.items() if path in LAYOUT}


@pytest.mark.parametrize("source", [Source.OBJECT_STATE, Source.HISTORY])
def test_a_replay_keeps_the_users_files_as_the_live_commits_left_them(tmp_path: Path, source: Source) -> None:
    remote = bare_remote(tmp_path / "live.git")
    for path, content in LAYOUT.items():
        foreign_push(remote, tmp_path, path, content)
    cfg = _settings(tmp_path, remote)
    asyncio.run(_live_run(cfg))
    live = files(remote)
    assert _user_files(live) == {
        MULTI_PATH: SETTINGS_DOC.replace("level: info", "level: warn")
        + "---\n"
        + FEATURES_DOC.replace('beta: "false"', 'beta: "true"'),
        "live/shop/kustomization.yaml": SHOP_KUSTOMIZATION + "  - configmap-fresh.yaml\n",
        "live/shop/settings.yaml": SHOP_SETTINGS.replace("currency: EUR", "currency: CHF"),
    }, "the live run edited the user's files in place, and placed the new object in the kustomization"
    commits = log_lines(remote)

    notes: list[str] = []
    request = ReplayRequest(provider="git", branch="main", source=source, tty=False)
    made = asyncio.run(replay_branch(cfg, request, note=notes.append))

    assert files(remote) == live, "every file byte for byte, and no canonical copy beside them"
    assert made == 0, notes
    assert log_lines(remote) == commits


def test_a_rebuild_from_object_state_repairs_a_drifted_users_file_in_place(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "live.git")
    for path, content in LAYOUT.items():
        foreign_push(remote, tmp_path, path, content)
    cfg = _settings(tmp_path, remote)
    asyncio.run(_live_run(cfg))
    live = files(remote)
    # somebody puts an old value back by hand
    foreign_push(remote, tmp_path, MULTI_PATH, live[MULTI_PATH].replace("level: warn", "level: info"))

    notes: list[str] = []
    request = ReplayRequest(provider="git", branch="main", source=Source.OBJECT_STATE, tty=False)
    assert asyncio.run(replay_branch(cfg, request, note=notes.append)) == 1, notes
    assert files(remote) == live, "the value is put back inside the user's file, comments and all"


@pytest.mark.parametrize("source", [Source.OBJECT_STATE, Source.HISTORY])
def test_a_rebuild_keeps_users_files_that_sit_at_object_paths(tmp_path: Path, source: Source) -> None:
    """A multi-document file and a file named for its object in a folder of another name both sit
    where the rebuild lists object documents; both hold objects it rebuilds, so both are kept and
    edited in place, never deleted beside a fresh canonical copy."""
    bundle = "live/team-a/configmaps/bundle.yaml"
    named = "live/team-a/settings/shop-settings.yaml"
    layout = {bundle: MULTI, named: SHOP_SETTINGS.replace("  labels:", "  namespace: team-a\n  labels:")}
    remote = bare_remote(tmp_path / "live.git")
    for path, content in layout.items():
        foreign_push(remote, tmp_path, path, content)
    cfg = _settings(tmp_path, remote)
    asyncio.run(_live_run(cfg))
    live = files(remote)
    assert live[bundle] == SETTINGS_DOC.replace(
        "level: info", "level: warn"
    ) + "---\n" + FEATURES_DOC.replace('beta: "false"', 'beta: "true"')
    assert live[named] == layout[named].replace("currency: EUR", "currency: CHF")

    notes: list[str] = []
    request = ReplayRequest(provider="git", branch="main", source=source, tty=False)
    made = asyncio.run(replay_branch(cfg, request, note=notes.append))
    assert files(remote) == live, notes
    assert made == 0
