"""The garbage collector policy (pipeline/gcpolicy.py): what is frozen, when, and how often.

Whether a container is frozen is read from the collector itself: a frozen container is still
tracked but in none of the three generations `gc.get_objects` lists. No clock is involved. The
once-per-process rule of `configure` runs in a fresh interpreter, where no earlier test has
configured anything, around two real `Service` starts.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline import gcpolicy


def _frozen(obj: object) -> bool:
    return gc.is_tracked(obj) and not any(o is obj for g in range(3) for o in gc.get_objects(g))


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen, so the rest of the session collects as usual;
    only the test's own collections run meanwhile (automatic ones would freeze at random)."""
    gc.unfreeze()
    gc.disable()
    yield
    gc.enable()
    gc.unfreeze()


@pytest.mark.parametrize("generation", [1, 2])
def test_inside_a_build_what_survives_a_middle_or_full_collection_is_frozen(generation: int) -> None:
    index = {"key": ["home"]}
    with gcpolicy.long_lived():
        assert not _frozen(index)
        gc.collect(generation)
        assert _frozen(index)
        assert gc.get_freeze_count() > 0
        young = ["allocated after the collection"]
        assert not _frozen(young)


def test_outside_a_build_a_full_collection_freezes_nothing() -> None:
    with gcpolicy.long_lived():
        pass
    kept = ["a survivor"]
    gc.collect()
    assert not _frozen(kept)
    assert gc.get_freeze_count() == 0


def test_a_young_collection_inside_a_build_freezes_nothing() -> None:
    kept = ["a survivor"]
    with gcpolicy.long_lived():
        gc.collect(0)
    assert not _frozen(kept)
    assert gc.get_freeze_count() == 0


def test_overlapping_builds_keep_the_hook_until_the_last_one_leaves_even_on_error() -> None:
    hooks = len(gc.callbacks)
    during: list[int] = []

    def failing_build() -> None:
        with gcpolicy.long_lived():
            with gcpolicy.long_lived():
                during.append(len(gc.callbacks))
            during.append(len(gc.callbacks))
            raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        failing_build()
    assert during == [hooks + 1, hooks + 1]
    assert len(gc.callbacks) == hooks


def test_the_service_freezes_what_start_up_built_once_per_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, gc
        from pathlib import Path
        from pipeline import gcpolicy
        from pipeline.config import LogSettings, MetricsSettings, Settings
        from pipeline.service.app import Service

        def frozen(obj):
            return gc.is_tracked(obj) and not any(o is obj for g in range(3) for o in gc.get_objects(g))

        async def start_and_stop(n, before):
            settings = Settings(
                workdir=Path({str(tmp_path)!r}) / str(n),
                log=LogSettings(backend="embedded", topic_prefix=f"gcpolicy-{{n}}"),
                metrics=MetricsSettings(addr="127.0.0.1:0"),
            )
            service = Service(settings, factories=[])
            await service.start()
            try:
                return frozen(before), frozen(service)
            finally:
                await service.stop()

        assert not gcpolicy.configured()
        first_built = ["before the first start"]
        print(asyncio.run(start_and_stop(1, first_built)), gcpolicy.configured())
        second_built = ["before the second start"]
        print(asyncio.run(start_and_stop(2, second_built)), gc.get_freeze_count() > 0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    # the first start froze what existed (and the service it built); the second froze nothing
    assert first == "(True, True) True"
    assert second == "(False, False) True"


def test_the_service_freezes_what_the_imports_built_before_its_first_stage_starts(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, gc
        from pathlib import Path
        from pipeline import gcpolicy
        from pipeline.config import LogSettings, MetricsSettings, Settings
        from pipeline.service.app import Service

        def frozen(obj):
            return gc.is_tracked(obj) and not any(o is obj for g in range(3) for o in gc.get_objects(g))

        imported = ["built by the imports"]
        seen = []

        class Stage:
            name = "probe"

            async def start(self):
                seen.append((frozen(imported), gcpolicy.configured()))

            async def stop(self):
                pass

            def ready(self):
                return True

        async def main():
            settings = Settings(
                workdir=Path({str(tmp_path)!r}),
                log=LogSettings(backend="embedded", topic_prefix="gcpolicy-imports"),
                metrics=MetricsSettings(addr="127.0.0.1:0"),
            )
            service = Service(settings, factories=[lambda settings, log: Stage()])
            await service.start()
            await service.stop()

        gc.disable()  # no collection of its own may freeze anything here
        assert not frozen(imported)
        asyncio.run(main())
        print(seen, gcpolicy.after_imports())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    # frozen before the first stage started, long before `configure` (once the start is done);
    # and only once per process
    assert done.stdout.strip() == "[(True, False)] False"


def test_after_imports_freezes_once_per_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import gc
        from pipeline import gcpolicy

        gc.disable()
        print(gcpolicy.after_imports(), gc.get_freeze_count() > 0)
        later = ["built after"]
        print(gcpolicy.after_imports(), gc.is_tracked(later) and any(o is later for o in gc.get_objects(0)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True True", "False True"]


class _Node:
    """A container that can be part of a reference cycle and be watched through a weak reference."""

    def __init__(self) -> None:
        self.peer: _Node | None = None


def test_reclaim_collects_a_frozen_cycle_dropped_since_and_freezes_the_survivors() -> None:
    dropped, kept = _Node(), ["still referenced"]
    dropped.peer = dropped
    watch = weakref.ref(dropped)
    with gcpolicy.long_lived():
        gc.collect()
    del dropped
    gc.collect()
    assert watch() is not None  # frozen: no collection walks it
    assert gcpolicy.reclaim() >= 1
    assert watch() is None
    assert _frozen(kept)


def test_configure_reports_whether_it_froze() -> None:
    # in this process a Service may already have configured the policy: then it must not again
    already = gcpolicy.configured()
    applied = gcpolicy.configure()
    assert applied is not already
    assert gcpolicy.configured()
    assert gcpolicy.configure() is False
