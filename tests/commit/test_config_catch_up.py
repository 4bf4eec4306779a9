"""The commit worker meets a provider or target it does not know yet (custom-resource mode).

Configurations are published on the real config topic (embedded log and Kafka) and read back by
the real `ConfigFollower`; the worker's `refresh_config` hook is what `reverser run` wires
(`Service.refresh_config`: catch up with the topic, apply what is newer). Work arrives before this
process applied the version that names its provider or target (the worker must catch up, not
park or mis-handle it), after (no catch-up needed), or for a provider no version has (parked once
the catch-up shows nothing, while other work goes on). Real bare Git remotes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.commit.consumer import CommitWorker
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.customresources.compile import CompiledConfig
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.state import ConfigState, encode_state
from pipeline.log.api import Log
from pipeline.log.topics import TopicNames, topic_specs
from tests.commit.helpers import Work, bare_remote, cm, files
from tests.commit.logwork import append_work, wait_settled


def _provider(name: str, remote: Path) -> ProviderSettings:
    return ProviderSettings(name=name, url=str(remote), commit_window_s=0.1, push_cooldown_s=0.1)


@dataclass
class Published:
    """Publishes configuration versions on the config topic, as the controller does."""

    log: Log
    base: Settings
    version: int = 0

    async def publish(self, providers: list[ProviderSettings], targets: list[TargetSettings]) -> Settings:
        self.version += 1
        compiled = CompiledConfig(providers, targets, {}, {}, [])
        topic = TopicNames.for_prefix(self.base.log.topic_prefix).config
        await self.log.append_many(topic, [encode_state(ConfigState(self.version, 0, compiled))])
        return compiled.settings(self.base)


@dataclass
class Refresher:
    """`Service.refresh_config` in small: catch up with the topic, hand newer versions to the worker."""

    follower: ConfigFollower
    base: Settings
    worker: CommitWorker | None = None
    applied: int = 0
    calls: list[int] = field(default_factory=list)

    async def __call__(self) -> None:
        state = await self.follower.catch_up()
        self.calls.append(state.version if state else 0)
        if state is not None and state.version > self.applied and self.worker is not None:
            await self.worker.apply(state.settings(self.base))
            self.applied = state.version


def _parked(reason: str) -> float:
    return REGISTRY.get_sample_value("reverser_commit_dead_lettered_total", {"reason": reason}) or 0.0


async def test_work_for_a_provider_and_target_added_live_is_committed(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    base = settings.model_copy(
        update={"custom_resources": settings.custom_resources.model_copy(update={"enabled": True})}
    )
    await any_log.create_topics(topic_specs(base))
    first, second, third = (bare_remote(tmp_path / f"{n}.git") for n in ("first", "second", "third"))
    published = Published(any_log, base)
    a = _provider("a", first)
    ta = TargetSettings(name="ta", provider="a", path="ta")
    v1 = await published.publish([a], [ta])
    follower = ConfigFollower(any_log, TopicNames.for_prefix(base.log.topic_prefix).config)
    refresh = Refresher(follower, base)
    await refresh()  # what `reverser run` does before it builds the stages: version 1
    worker = CommitWorker(v1, any_log)
    refresh.worker = worker
    worker.use_config_refresh(refresh)
    await worker.start()
    try:
        wa = Work(provider="a", target="ta", path="ta", step_ms=10)
        await append_work(any_log, base, [wa.create(cm("one"))])
        await wait_settled(any_log, base)
        assert refresh.calls == [1], "work of a known provider and target needs no catch-up"

        # before: version 2 (target tb2 on a's branch, whose FIFO runs) is on the topic, this
        # process has not applied it; its work arrives: the delete must apply under tb2's prune
        # mode (OnEvent), not as an unknown target's (Never, which would keep the file)
        tb2 = TargetSettings(name="tb2", provider="a", path="tb2", prune="OnEvent")
        await published.publish([a], [ta, tb2])
        w2 = Work(provider="a", target="tb2", path="tb2", step_ms=10)
        await append_work(any_log, base, [w2.create(cm("gone-soon")), w2.delete("gone-soon")])
        await wait_settled(any_log, base)
        assert refresh.applied == 2
        assert sorted(files(first)) == ["ta/team-a/configmaps/one.yaml"]

        # before: version 3 adds provider b (no FIFO yet); its work arrives
        b = _provider("b", second)
        tb = TargetSettings(name="tb", provider="b", path="tb")
        await published.publish([a, b], [ta, tb2, tb])
        wb = Work(provider="b", target="tb", path="tb", step_ms=10)
        await append_work(any_log, base, [wb.create(cm("two"))])
        await wait_settled(any_log, base)
        assert refresh.applied == 3
        assert sorted(files(second)) == ["tb/team-a/configmaps/two.yaml"]

        # after: version 4 (provider c) applied the way the follower does, then its work
        c = _provider("c", third)
        tc = TargetSettings(name="tc", provider="c", path="tc")
        v4 = await published.publish([a, b, c], [ta, tb2, tb, tc])
        calls = len(refresh.calls)
        await worker.apply(v4)
        refresh.applied = 4
        wc = Work(provider="c", target="tc", path="tc", step_ms=10)
        await append_work(any_log, base, [wc.create(cm("three"))])
        await wait_settled(any_log, base)
        assert sorted(files(third)) == ["tc/team-a/configmaps/three.yaml"]
        assert len(refresh.calls) == calls, "work of an applied version needs no catch-up"

        # never: a provider no version has is parked after the catch-up; other work goes on
        parked = _parked("unknown_provider")
        wz = Work(provider="nowhere", target="tz", path="tz", step_ms=10)
        await append_work(any_log, base, [wz.create(cm("lost")), wa.create(cm("four"))])
        await wait_settled(any_log, base)
        assert _parked("unknown_provider") == parked + 1
        assert "ta/team-a/configmaps/four.yaml" in files(first)
    finally:
        await worker.stop()
        await follower.close()
