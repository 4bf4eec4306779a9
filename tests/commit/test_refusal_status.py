"""A refused in-place change stalls its GitTarget, through the real log (issue 29).

A real commit worker on the real log (both backends) with custom resources: a change into a
kustomization the writer does not model is refused, nothing reaches the remote, its record is
dead-lettered, and the target's result on the config topic, as the controller's follower reads it,
makes the GitTarget `Stalled` naming the reason and the file; once the user pushes a fixed folder,
the next change is committed and the condition clears.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.codec.target_result import PushOutcome, TargetResult
from pipeline.commit.consumer import CommitWorker
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.customresources.compile import ObjectReport
from pipeline.customresources.conditions import target_conditions
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.objects import Kind, ObjectRef
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from tests.commit.helpers import Work, bare_remote, cm, files, foreign_push, git
from tests.commit.logwork import append_work
from tests.commit.test_config_catch_up import Published
from tests.commit.test_in_place import NAME_PREFIX, SETTINGS_DOC
from tests.deadletter.test_dead_letters import dead_lettered
from tests.support.wait import wait_for

TIMEOUT_S = 60.0
TARGET = ObjectReport(ObjectRef(Kind.GIT_TARGET, "reverser", "t1"), 3)


def _stalled(result: TargetResult) -> dict[str, str]:
    conditions = target_conditions(TARGET, False, None, result)
    return next(c for c in conditions if c["type"] == "Stalled")


async def test_a_refused_change_stalls_the_target_until_the_fixed_folder_takes_one(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    base = settings.model_copy(
        update={"custom_resources": settings.custom_resources.model_copy(update={"enabled": True})}
    )
    await any_log.create_topics(topic_specs(base))
    remote = bare_remote(tmp_path / "live.git")
    for path, content in NAME_PREFIX.items():
        foreign_push(remote, tmp_path, path, content)
    tip = git(remote, "rev-parse", "main")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    target = TargetSettings(name="t1", provider="git", path="live")
    configured = await Published(any_log, base).publish([provider], [target])
    follower = ConfigFollower(any_log, TopicNames.for_prefix(base.log.topic_prefix).config)
    worker = CommitWorker(configured, any_log)
    await worker.start()
    w = Work(step_ms=10)
    parked = dead_lettered("unappliable")
    try:
        await append_work(
            any_log, configured, [w.update(cm("app-settings", level="debug", region="eu-1"), rv="2")]
        )

        async def result(refused: bool) -> bool:
            await follower.catch_up()
            found = follower.results.get("t1")
            return found is not None and (found.refusal is not None) is refused

        await wait_for(lambda: result(True), "the refusal on the config topic", timeout_s=TIMEOUT_S)
        stalled = _stalled(follower.results["t1"])
        assert (stalled["status"], stalled["reason"]) == ("True", "UnsupportedKustomization")
        assert "live/app/kustomization.yaml" in stalled["message"]
        assert "ConfigMap team-a/app-settings" in stalled["message"]
        assert "namePrefix" not in stalled["message"], "the file is named, its content is not"
        assert git(remote, "rev-parse", "main") == tip, "nothing was written"
        assert dead_lettered("unappliable") == parked + 1

        fixed = "resources:\n  - settings.yaml\n"
        foreign_push(remote, tmp_path, "live/app/kustomization.yaml", fixed)
        await append_work(
            any_log, configured, [w.update(cm("app-settings", level="warn", region="eu-1"), rv="3")]
        )
        await wait_for(lambda: result(False), "the refusal cleared", timeout_s=TIMEOUT_S)
        cleared = follower.results["t1"]
        assert cleared.push is PushOutcome.SUCCEEDED
        assert cleared.commit == git(remote, "rev-parse", "main").strip()
        assert _stalled(cleared)["status"] == "False"
        written = files(remote)
        assert written["live/app/settings.yaml"] == SETTINGS_DOC.replace("level: info", "level: warn")
        assert written["live/app/kustomization.yaml"] == fixed
    finally:
        await worker.stop()
        await follower.close()
