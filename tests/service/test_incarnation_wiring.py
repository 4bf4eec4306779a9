"""`reverser run` holds its workdir's incarnation record while it runs and hands it to the log and to
the stages that hold Leases (pipeline.incarnation); a stop releases it for the next run."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import LogSettings, MetricsSettings, Settings
from pipeline.incarnation import Incarnation
from pipeline.log import open_log
from pipeline.log.api import Log
from pipeline.service.app import Service
from tests.conftest import unique_prefix


class LeaseHolder:
    """A stage that takes the incarnation, as the watch stage does for its Lease electors."""

    name = "lease-holder"

    def __init__(self) -> None:
        self.incarnation: Incarnation | None = None

    def use_incarnation(self, incarnation: Incarnation) -> None:
        self.incarnation = incarnation

    async def start(self) -> None:
        assert self.incarnation is not None, "handed over before the stage starts"
        self.incarnation.holds_leases_as("run-2")

    async def stop(self) -> None:
        return None

    def ready(self) -> bool:
        return True


async def test_a_run_holds_its_workdir_and_hands_the_previous_runs_record_on(tmp_path: Path) -> None:
    crashed = Incarnation.claim(tmp_path)
    assert crashed is not None
    crashed.holds_leases_as("run-1")
    crashed.close()
    settings = Settings(
        workdir=tmp_path,
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0"),
    )
    stage = LeaseHolder()

    def build(_s: Settings, _l: Log) -> LeaseHolder:
        return stage

    service = Service(settings, factories=[build])
    await service.start()
    try:
        assert stage.incarnation is not None
        assert stage.incarnation.predecessor_lease_identity == "run-1"
        assert service.log.incarnation is stage.incarnation
        assert Incarnation.claim(tmp_path) is None, "a second process on the workdir takes nothing"
    finally:
        await service.stop()
    after = Incarnation.claim(tmp_path)
    assert after is not None, "a stopped run releases the workdir"
    assert after.predecessor_lease_identity == "run-2"
    after.close()


async def test_a_log_handed_in_is_given_no_runs_record(tmp_path: Path) -> None:
    settings = Settings(
        workdir=tmp_path,
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0"),
    )
    log = open_log(settings)
    service = Service(settings, log, factories=[])
    await service.start()
    try:
        assert log.incarnation is None
    finally:
        await service.stop()
