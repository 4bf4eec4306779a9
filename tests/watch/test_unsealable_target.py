"""A target whose encryption cannot be set up is not watched, never a reason to stop the stage.

Once a target with `encryption` whose digest key variable was unset raised ConfigError when the
watch stage was built (`reverser run` exited 2, on every restart) and made it refuse every later
configuration. Real watch streams against the watch-protocol test server on both log backends:
the other target streams, the unsealable one is a rule problem naming the variable, and a
configuration taken once the variable is set starts its stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import EncryptionSettings, Settings
from pipeline.log.api import Log
from tests.support.wait import wait_for
from tests.watch.conftest import fast_options, make_component, rule, target, with_targets
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

DIGEST_ENV = "REVERSER_TEST_UNSEALABLE_DIGEST_KEY"
AGE = "age1" + "q" * 58


async def test_a_target_whose_digest_key_is_unset_is_not_watched_and_the_others_are(
    kube: FakeKubeApiServer,
    topics_log: Log,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DIGEST_ENV, raising=False)
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    sealed = target("sealed", rule("configmaps", namespaces=("team-a",))).model_copy(
        update={"encryption": EncryptionSettings(age_recipients=[AGE], digest_key_env=DIGEST_ENV)}
    )
    plain = target("plain", rule("configmaps", namespaces=("team-a",)))
    config = with_targets(settings, kube.kubeconfig(tmp_path), plain, sealed)
    component = make_component(config, topics_log, fast_options(config))  # once: ConfigError, exit 2
    await component.start()
    try:
        (stream,) = component.manager.streams.values()
        assert stream.spec.stream.target == "plain"
        await wait_for(lambda: stream.state == "Streaming", what="the plain target's stream")
        (problem,) = component.manager.problems
        assert (problem.target, problem.reason) == ("sealed", "EncryptionUnavailable")
        assert DIGEST_ENV in problem.message

        monkeypatch.setenv(DIGEST_ENV, "k" * 32)
        assert await component.apply(config) == (1, 0)
        assert sorted(spec.stream.target for spec in component.manager.streams) == ["plain", "sealed"]
        assert component.manager.problems == []
    finally:
        await component.stop()
