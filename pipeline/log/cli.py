"""`reverser topics create|check|list|describe`: create the pipeline's topics, report how they
drifted, or show what the log holds for them (`pipeline.log.inventory`).

Operators run `check` before an upgrade or from CI; it exits non-zero when a topic is missing or a
partition count, replication factor, `min.insync.replicas` or other topic configuration differs
from what `pipeline.log.topics.topic_specs` needs, so a broker someone tuned by hand cannot
silently break retention, ordering or durability.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from pipeline.commandline import add_bootstrap_argument, add_config_argument, settings_from_args
from pipeline.config import Settings
from pipeline.exitcodes import ExitCode, usage_error
from pipeline.log import Log, TopicDescription, TopicSpec, open_log
from pipeline.log.inventory import TopicInventory, describe_lines, gather, list_table
from pipeline.log.topics import TopicNames, state_risks, topic_specs
from pipeline.tables import OutputFormat, add_output_argument, aligned, document

__all__ = [
    "CheckReport",
    "CreateReport",
    "Drift",
    "TopicAction",
    "check_topics",
    "create_topics",
    "find_drift",
    "register",
]

MISSING = "(missing)"
UNSET = "(unset)"


class TopicAction(BaseModel):
    """What `create` did to one topic."""

    topic: str
    action: Literal["created", "exists"]
    partitions: int
    replication_factor: int
    configs: dict[str, str]


class CreateReport(BaseModel):
    backend: str
    topics: list[TopicAction]


class Drift(BaseModel):
    """One setting of one topic that differs from what the pipeline needs.

    `kind` is `drift` (differs from the configuration) or `risk` (state can be lost even though the
    configuration asks for it; see `pipeline.log.topics.state_risks`).
    """

    topic: str
    setting: str
    expected: str
    actual: str
    kind: Literal["drift", "risk"] = "drift"


class CheckReport(BaseModel):
    backend: str
    checked: list[str]
    drift: list[Drift]

    @property
    def ok(self) -> bool:
        return not self.drift


def find_drift(spec: TopicSpec, description: TopicDescription | None) -> list[Drift]:
    """Every difference between a topic's required spec and what the log reports about it."""
    if description is None:
        return [Drift(topic=spec.name, setting="topic", expected="present", actual=MISSING)]
    drift = []
    if description.partitions != spec.partitions:
        drift.append(
            Drift(
                topic=spec.name,
                setting="partitions",
                expected=str(spec.partitions),
                actual=str(description.partitions),
            )
        )
    if spec.replication_factor is not None and description.replication_factor != spec.replication_factor:
        drift.append(
            Drift(
                topic=spec.name,
                setting="replication.factor",
                expected=str(spec.replication_factor),
                actual=str(description.replication_factor),
            )
        )
    for name, expected in spec.configs().items():
        actual = description.configs.get(name)
        if actual != expected:
            drift.append(Drift(topic=spec.name, setting=name, expected=expected, actual=actual or UNSET))
    return drift


async def create_topics(log: Log, specs: Sequence[TopicSpec]) -> CreateReport:
    created = set(await log.create_topics(specs))
    brokers = await log.broker_count()
    specs = [spec.for_brokers(brokers) for spec in specs]
    return CreateReport(
        backend=log.kind,
        topics=[
            TopicAction(
                topic=spec.name,
                action="created" if spec.name in created else "exists",
                partitions=spec.partitions,
                replication_factor=spec.replication_factor or 1,
                configs=spec.configs(),
            )
            for spec in specs
        ],
    )


async def check_topics(log: Log, specs: Sequence[TopicSpec], names: TopicNames | None = None) -> CheckReport:
    """Drift of every topic from its spec, plus (given the topic names) the state-loss risks."""
    brokers = await log.broker_count()
    specs = [spec.for_brokers(brokers) for spec in specs]
    described = await log.describe_topics([spec.name for spec in specs])
    drift = [item for spec in specs for item in find_drift(spec, described.get(spec.name))]
    if names is not None:
        drifted = {(d.topic, d.setting) for d in drift}
        drift += [
            Drift(topic=r.topic, setting=r.setting, expected=r.expected, actual=r.actual, kind="risk")
            for r in state_risks(names, described)
            if (r.topic, r.setting) not in drifted
        ]
    return CheckReport(backend=log.kind, checked=[spec.name for spec in specs], drift=drift)


async def _with_log(settings: Settings, action: str) -> CreateReport | CheckReport:
    async with open_log(settings) as log:
        specs = topic_specs(settings)
        if action == "create":
            return await create_topics(log, specs)
        return await check_topics(log, specs, TopicNames.for_prefix(settings.log.topic_prefix))


def render(report: CreateReport | CheckReport, output: OutputFormat) -> str:
    """The report as an aligned table (one line per topic or per drifted setting) or a document."""
    if output is not OutputFormat.TABLE:
        data = report.model_dump()
        if isinstance(report, CheckReport):
            data["ok"] = report.ok
        return document(data, output)
    if isinstance(report, CreateReport):
        rows = [("TOPIC", "ACTION", "PARTITIONS", "REPLICAS", "CONFIGS")]
        rows += [
            (
                t.topic,
                t.action,
                str(t.partitions),
                str(t.replication_factor),
                ",".join(f"{k}={v}" for k, v in sorted(t.configs.items())),
            )
            for t in report.topics
        ]
        return aligned(rows)
    if report.ok:
        return f"ok: {len(report.checked)} topics match their required configuration ({report.backend} log)"
    drift_rows: list[tuple[str, ...]] = [("TOPIC", "SETTING", "EXPECTED", "ACTUAL", "KIND")]
    drift_rows += [(d.topic, d.setting, d.expected, d.actual, d.kind) for d in report.drift]
    return aligned(drift_rows)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("topics")
    actions = parser.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    for name, help_text in (
        ("create", "create missing topics with the configuration the pipeline needs"),
        ("check", f"report configuration drift; exits {ExitCode.FINDINGS:d} when any topic drifted"),
    ):
        sub = actions.add_parser(name, help=help_text)
        add_config_argument(sub, reads_existing_log=name == "check")
        add_bootstrap_argument(sub)
        add_output_argument(sub)
        sub.set_defaults(func=_run, topics_action=name)
    for name, help_text in (
        ("list", "each topic's partitions, replicas, cleanup, retention and offsets written (read-only)"),
        ("describe", "each topic's (or TOPIC's) configuration and per-partition end offsets (read-only)"),
    ):
        sub = actions.add_parser(name, help=help_text)
        add_config_argument(sub, reads_existing_log=True)
        add_bootstrap_argument(sub)
        if name == "describe":
            sub.add_argument(
                "topic",
                nargs="?",
                metavar="TOPIC",
                help="one topic, with or without the prefix (default: every topic)",
            )
        add_output_argument(sub)
        sub.set_defaults(func=_run_inventory, topics_action=name)


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    report = asyncio.run(_with_log(settings, args.topics_action))
    print(render(report, args.output))
    if isinstance(report, CheckReport) and not report.ok:
        return ExitCode.FINDINGS
    return ExitCode.OK


def _run_inventory(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    names = _chosen_topics(settings, getattr(args, "topic", None))
    inventory = asyncio.run(_inventory(settings, names))
    if args.output is not OutputFormat.TABLE:
        print(document(inventory.model_dump(), args.output))
    else:
        print(list_table(inventory) if args.topics_action == "list" else describe_lines(inventory))
    return ExitCode.OK


def _chosen_topics(settings: Settings, topic: str | None) -> list[str]:
    """The pipeline's topics, or the one `topic` names (`branch-work` or `reverser.branch-work`);
    raises CommandError (USAGE) for a topic that is not the pipeline's."""
    names = [spec.name for spec in topic_specs(settings)]
    if topic is None:
        return names
    for name in (topic, settings.topic(topic)):
        if name in names:
            return [name]
    raise usage_error(f"{topic}: not one of the pipeline's topics ({', '.join(names)})")


async def _inventory(settings: Settings, names: Sequence[str]) -> TopicInventory:
    async with open_log(settings) as log:
        return await gather(log, names)
