"""Runs the configured stages in one process, with `/metrics`, `/healthz` and `/readyz`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable

from prometheus_client import Counter, Gauge

from pipeline import gcpolicy, mallocpolicy
from pipeline.audit import component as audit_component
from pipeline.backoff import log_retry
from pipeline.codec.branch_work import work_record
from pipeline.commit import component as commit_component
from pipeline.component import (
    Component,
    ComponentFactory,
    ConfigRefreshing,
    Failing,
    ObjectReading,
    OpsRoutes,
    Reconfigurable,
    Succeeding,
)
from pipeline.config import ConfigError, Settings, split_host_port
from pipeline.customresources import component as customresources_component
from pipeline.customresources.controller import ConfigController
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.retire import retired_work
from pipeline.customresources.state import ConfigState
from pipeline.exitcodes import CommandError, ExitCode
from pipeline.incarnation import Incarnation
from pipeline.lag import component as lag_component
from pipeline.log import Log, open_log
from pipeline.log.retrying import until_done
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.router import component as router_component
from pipeline.service.looplag import watch_loop_lag
from pipeline.service.objects import ClusterObjects
from pipeline.service.ops import PUBLISH_INTERVAL_S, HealthSnapshot, OpsServer
from pipeline.service.readiness import READY_GAUGE, LogProbe, readiness_of, verdict
from pipeline.service.reload import LIVE_SETTINGS, restart_only_changes, take_live
from pipeline.tasks import cancel_all
from pipeline.watch import component as watch_component

logger = logging.getLogger(__name__)

CONFIG_VERSION = Gauge(
    "reverser_config_version",
    "Version of the effective configuration from custom resources this process runs (0: none yet)",
)
CONFIG_CHANGES = Counter(
    "reverser_config_changes_total",
    "Configuration changes applied while running, by source (custom_resources|file) and outcome "
    "(applied|invalid|refused)",
    ["source", "outcome"],
)
RELOAD_IGNORED = Counter(
    "reverser_config_reload_ignored_total",
    "Settings a reload (SIGHUP) found changed but did not apply because they need a restart, by "
    "setting (dotted name, e.g. audit.addr; targets: they need a stage not built at start)",
    ["setting"],
)

# Every stage factory, in start order (stopped in reverse).
COMPONENT_FACTORIES: tuple[ComponentFactory, ...] = (
    lag_component.build,
    audit_component.build,
    router_component.build,
    commit_component.build,
    watch_component.build,
    customresources_component.build,
)

# The stages a static file builds only when it configures what they work on: (factory, the rule,
# the component's name). A reload cannot start them, so a file that gains it needs a restart.
TARGET_STAGES: tuple[tuple[ComponentFactory, Callable[[Settings], bool], str], ...] = (
    (router_component.build, router_component.needed, "router"),
    (commit_component.build, commit_component.needed, "commit-worker"),
    (watch_component.build, watch_component.needed, "watch"),
)

# How often `reverser run` checks whether a stage lost a task it cannot recover (`Failing`).
FAILURE_CHECK_S = 1.0

# Hooks adding read-only routes to the ops server (the metrics port).
OPS_ROUTES: tuple[OpsRoutes, ...] = (lag_component.ops_routes,)


class Service:
    """The process: one log, the stages built from configuration, and the ops endpoints."""

    def __init__(
        self,
        settings: Settings,
        log_: Log | None = None,
        factories: list[ComponentFactory] | None = None,
        *,
        reload: Callable[[], Settings] | None = None,
    ) -> None:
        """`reload` reads the configuration file again (SIGHUP); it raises ConfigError when invalid."""
        self.settings = settings
        # The file as loaded: with custom resources, providers and targets come from the config topic.
        self._base = settings
        self._reload = reload
        self._config: ConfigFollower | None = None
        self._following: asyncio.Task[None] | None = None
        self._applying = asyncio.Lock()
        self.config_version = 0
        self.log = log_ if log_ is not None else open_log(settings)
        # a log handed in is shared with others: only a log of its own carries this run's record
        self._owns_log = log_ is None
        self._incarnation: Incarnation | None = None
        self._factories = factories if factories is not None else list(COMPONENT_FACTORIES)
        self.components: list[Component] = []
        self._starting: list[Component] = []
        self._ops: OpsServer | None = None
        self._publishing: asyncio.Task[None] | None = None
        self._probe = LogProbe(
            self.log,
            [spec.name for spec in topic_specs(settings)],
            interval_s=settings.metrics.log_probe_interval_s,
            timeout_s=settings.metrics.log_probe_timeout_s,
        )
        self._probing: asyncio.Task[None] | None = None
        self._lag: asyncio.Task[None] | None = None
        self.metrics_port: int | None = None
        self._objects = ClusterObjects(settings)

    async def start(self) -> None:
        """Start everything, or nothing: a stage that fails to start stops the ones before it.

        Every stage is built before the first one starts, so `/readyz` (served from the start)
        names the stages still to come instead of calling a half-started replica ready.
        """
        gcpolicy.after_imports()
        mallocpolicy.configure()
        self._incarnation = Incarnation.claim(self.settings.workdir)
        if self._owns_log:
            self.log.incarnation = self._incarnation
        await self.log.start()
        try:
            created = await self.log.create_topics(topic_specs(self.settings))
            if created:
                logger.info("created topics: %s", ", ".join(created))
            if self.settings.custom_resources.enabled:
                await self._read_config()
            built = [factory(self.settings, self.log) for factory in self._factories]
            self._starting = [component for component in built if component is not None]
            unbuilt = self._unbuilt_stages(self.settings)
            if unbuilt and not self.settings.custom_resources.enabled:
                logger.warning(
                    "the configuration file builds no %s stage (no targets, or no target with rules "
                    "on a configured cluster); a reload (SIGHUP) cannot start it: targets added to "
                    "the file later take effect only after a restart",
                    ", ".join(unbuilt),
                )
            routers = [c for c in self._starting if isinstance(c, router_component.RouterComponent)]
            for component in self._starting:
                if isinstance(component, ConfigController) and routers:
                    component.use_fact_index(routers[0].follower.index)
                if isinstance(component, ConfigRefreshing) and self._config is not None:
                    component.use_config_refresh(self.refresh_config)
                if isinstance(component, ObjectReading):
                    component.use_object_reader(self._objects.read)
                if isinstance(component, Succeeding) and self._incarnation is not None:
                    component.use_incarnation(self._incarnation)
            await self._probe.check()
            self._probing = asyncio.create_task(
                self._probe.run(self._refresh_health), name="readiness log probe"
            )
            await self._start_ops_server()
            self._publishing = asyncio.create_task(self._publish_health(), name="ops health")
            self._lag = asyncio.create_task(watch_loop_lag(), name="event loop lag")
            while self._starting:
                component = self._starting[0]
                await component.start()
                self.components.append(self._starting.pop(0))
                logger.info("started %s", component.name)
            if self._config is not None:
                self._following = asyncio.create_task(
                    self._config.follow(self._apply_state), name="config follower"
                )
            self._refresh_health()
        except BaseException:
            await self.stop()
            raise
        # what start-up built (the stages, their replayed indexes) lives as long as the process
        gcpolicy.configure()

    async def _read_config(self) -> None:
        """Start from the newest published configuration (none yet: no providers or targets)."""
        self._config = ConfigFollower(self.log, TopicNames.for_prefix(self._base.log.topic_prefix).config)
        state = await self._config.catch_up()
        if state is not None:
            self.settings = state.settings(self._base)
            self.config_version = state.version
            CONFIG_VERSION.set(state.version)
        logger.info("configuration from custom resources: version %s", state.version if state else "none yet")

    async def _apply_state(self, state: ConfigState) -> None:
        if state.version <= self.config_version:
            return
        await self._apply(state.settings(self._base), "custom_resources")
        self.config_version = state.version
        CONFIG_VERSION.set(state.version)
        logger.info("applied configuration version %d", state.version)

    async def refresh_config(self) -> None:
        """Catch up with the config topic now and apply what is newer (a stage met an unknown name)."""
        if self._config is None:
            return
        state = await self._config.catch_up()
        if state is not None:
            await self._apply_state(state)

    async def _apply(self, settings: Settings, source: str) -> None:
        """Hand a changed configuration to every running stage that takes one, in start order.

        A stage that refuses it (ConfigError) keeps what it runs and is named in the log; the
        stages after it still take it, so one bad object never holds the others' changes back.
        """
        async with self._applying:
            self.settings = settings
            refused = False
            for component in self.components:
                if isinstance(component, Reconfigurable):
                    try:
                        await component.apply(settings)
                    except ConfigError as exc:
                        refused = True
                        logger.error("%s refused the configuration: %s", component.name, exc)
            CONFIG_CHANGES.labels(source, "invalid" if refused else "applied").inc()

    async def reload(self) -> None:
        """SIGHUP: read the file again and apply it through the same path as a published version.

        An invalid file changes nothing (the error is logged and counted); switching between the
        file's providers and custom resources needs a restart. Only the live settings are taken
        (`pipeline/service/reload.py`); every other change is named in the log, counted in
        `reverser_config_reload_ignored_total`, and waits for a restart.
        """
        if self._reload is None:
            return
        try:
            fresh = self._reload()
        except ConfigError as exc:
            CONFIG_CHANGES.labels("file", "invalid").inc()
            logger.error("reload refused, the running configuration stays: %s", exc)
            return
        if fresh.custom_resources.enabled != self._base.custom_resources.enabled:
            CONFIG_CHANGES.labels("file", "refused").inc()
            logger.error("reload refused: switching custom_resources.enabled needs a restart")
            return
        ignored = restart_only_changes(self._base, fresh)
        for setting in ignored:
            RELOAD_IGNORED.labels(setting).inc()
        if ignored:
            logger.warning(
                "reload: not applied, these settings take effect only after a restart: %s",
                ", ".join(ignored),
            )
        try:
            base = take_live(self._base, fresh)
        except ConfigError as exc:
            CONFIG_CHANGES.labels("file", "invalid").inc()
            logger.error("reload refused, the running configuration stays: %s", exc)
            return
        previous = self._base
        self._base = base
        self._name_stages_to_restart(base)
        latest = self._config.latest if self._config is not None else None
        await self._apply(latest.settings(base) if latest is not None else base, "file")
        if self._config is None:
            await self._retire_removed(previous, base)
        logger.info("reloaded the configuration file (%s)", ", ".join(sorted(LIVE_SETTINGS)))

    def _unbuilt_stages(self, settings: Settings) -> list[str]:
        """The target stages of this process's factories that `settings` does not need."""
        return [
            name for build, needed, name in TARGET_STAGES if build in self._factories and not needed(settings)
        ]

    def _name_stages_to_restart(self, fresh: Settings) -> None:
        """A reloaded file whose targets need a stage not built at start: say that it needs a
        restart (and count it under the setting `targets`); the other stages take the file."""
        running = {component.name for component in self.components}
        missing = [
            name
            for build, needed, name in TARGET_STAGES
            if build in self._factories and needed(fresh) and name not in running
        ]
        if missing:
            RELOAD_IGNORED.labels("targets").inc()
            logger.error(
                "reload: the file's targets need the %s stage, which was not built at start (the "
                "file had no targets for it): restart reverser run to write them",
                ", ".join(missing),
            )

    async def _retire_removed(self, old: Settings, new: Settings) -> None:
        """Static mode: the targets a reload removed get their `TargetDeleted` work, as in
        custom-resource mode (`pipeline/customresources/retire.py`), appended once every stage
        runs without them, so the router routes nothing of them after it. Each replica that
        reloads appends its own: a second one of a target finds its folder already handled."""
        gone = {t.name for t in old.targets} - {t.name for t in new.targets}
        if not gone:
            return
        items = retired_work(
            old,
            new,
            gone,
            0,
            "target {name} was removed from the configuration file (reload)",
            observed_at_ms=int(time.time() * 1000),
        )
        if not items:
            return
        topic = TopicNames.for_prefix(new.log.topic_prefix).branch_work
        await until_done(
            lambda: self.log.append_many(topic, [work_record(item) for item in items]),
            log_retry(),
            logger,
            f"appending the deletion of target(s) {', '.join(sorted(gone))}",
        )
        logger.info(
            "reload: target(s) %s removed from the file", ", ".join(item.stream.target for item in items)
        )

    async def stop(self) -> None:
        self._starting = []
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._following
            self._following = None
        if self._config is not None:
            await self._config.close()
            self._config = None
        for task in (self._probing, self._lag, self._publishing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._probing = self._lag = self._publishing = None
        for component in reversed(self.components):
            try:
                await component.stop()
            except Exception:
                logger.exception("stopping %s failed", component.name)
        self.components.clear()
        if self._ops is not None:
            await self._ops.stop()
            self._ops = None
        await self._objects.close()
        await self.log.close()
        if self._incarnation is not None:
            self._incarnation.close()
            self._incarnation = None

    def readiness(self) -> tuple[bool, list[str]]:
        """(ready, the unmet conditions): the log answers, every stage started, every stage ready."""
        return verdict(
            self._probe.state,
            [component.name for component in self._starting],
            [(component.name, readiness_of(component)) for component in self.components],
        )

    def ready(self) -> bool:
        return self.readiness()[0]

    def failures(self) -> list[str]:
        """One line per stage that lost a task for good (`Failing`): the process must be restarted."""
        found = []
        for component in self.components:
            failure = component.failure() if isinstance(component, Failing) else None
            if failure is not None:
                found.append(f"{component.name}: {failure}")
        return found

    def _refresh_health(self) -> None:
        """After a log probe: the ready gauge and the ops thread's snapshot at once."""
        health = self._health()
        if self._ops is not None:
            self._ops.publish(health)

    async def _start_ops_server(self) -> None:
        """`/metrics`, `/healthz`, `/readyz` (and the `OPS_ROUTES`) on their own thread (service/ops.py)."""
        host, port = split_host_port(self.settings.metrics.addr)
        forwarded = [
            route for hook in OPS_ROUTES for route in hook(self.settings, lambda: tuple(self.components))
        ]
        self._ops = OpsServer(
            host, port, stall_fail_s=self.settings.metrics.loop_stall_fail_s, forwarded=forwarded
        )
        self.metrics_port = await self._ops.start()
        self._refresh_health()
        logger.info("metrics on http://%s:%s/metrics", host, self.metrics_port)

    def _health(self) -> HealthSnapshot:
        ready, problems = self.readiness()
        READY_GAUGE.set(1.0 if ready else 0.0)
        return HealthSnapshot(time.monotonic(), tuple(self.failures()), ready, tuple(problems))

    async def _publish_health(self) -> None:
        """Tell the ops thread how the stages are, every `PUBLISH_INTERVAL_S` while the loop runs."""
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL_S)
            self._refresh_health()


async def _stop_on_failure(service: Service, stop: asyncio.Event) -> None:
    while True:
        await asyncio.sleep(FAILURE_CHECK_S)
        failures = service.failures()
        if failures:
            logger.error("stopping: %s", "; ".join(failures))
            stop.set()
            return


async def run_until_signalled(service: Service, *, started: bool = False) -> None:
    """Start the service (unless already started), run until SIGINT/SIGTERM, then stop it cleanly.

    A stage that loses a task for good stops it too, with CommandError (exit code 1) naming it:
    a supervisor restarts the process, which resumes from the committed offsets.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[None]] = set()

    def reload() -> None:
        task = asyncio.create_task(service.reload(), name="reload configuration")
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, reload)
    if not started:
        await service.start()
    watcher = asyncio.create_task(_stop_on_failure(service, stop), name="watch stage failures")
    try:
        await stop.wait()
    finally:
        logger.info("shutting down")
        await cancel_all([watcher])
        failed = service.failures()  # read before the stages stop and forget their tasks
        await service.stop()
    if failed:
        raise CommandError("a stage failed, restart the process: " + "; ".join(failed), ExitCode.FINDINGS)
