"""`reverser replay facts`: rebuild the fact index from `<prefix>.audit-facts` and report what it holds.

This is the replay every process performs at start, run on its own: it shows how long a restart's
rebuild takes, whether retention deleted facts before they were read, and which streams carry facts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any, Literal

from pydantic import BaseModel

from pipeline.attribution.follower import FactFollower
from pipeline.attribution.index import FactIndex
from pipeline.commandline import add_config_argument, settings_from_args
from pipeline.config import Settings
from pipeline.exitcodes import ExitCode
from pipeline.log import open_log
from pipeline.log.topics import TopicNames
from pipeline.tables import OutputFormat, add_output_argument, document

__all__ = ["FactReplayReport", "replay_facts"]

PROGRESS_INTERVAL_S = 1.0


class FactReplayReport(BaseModel):
    """What the rebuilt index holds once it caught up with the end offsets seen at start."""

    topic: str
    records_applied: int
    records_refused: int
    gaps: int
    seconds: float
    entries: int
    evictions: dict[str, int]
    streams: dict[str, int]


def add_replay_facts_parser(kinds: Any) -> None:
    """Registered under `reverser replay` by `pipeline/replay.py`, next to `replay branch`."""
    parser = kinds.add_parser("facts", help="rebuild the fact index from audit-facts and report it")
    add_config_argument(parser, reads_existing_log=True)
    add_output_argument(parser)
    parser.set_defaults(func=_run)


async def replay_facts(
    settings: Settings, progress: Literal["stderr", "none"] = "stderr"
) -> FactReplayReport:
    """Follow the fact topic from `now - TTL` until caught up; the log is opened and closed here."""
    topics = TopicNames.for_prefix(settings.log.topic_prefix)
    index = FactIndex.from_settings(settings.attribution)
    async with open_log(settings) as log:
        follower = FactFollower(log, topics, index, settings)
        started = time.monotonic()
        await follower.start()
        while not follower.ready():
            if progress == "stderr":
                print(
                    f"replaying {topics.audit_facts}: {follower.records_applied} records applied, "
                    f"{len(index)} index entries",
                    file=sys.stderr,
                    flush=True,
                )
            await asyncio.sleep(PROGRESS_INTERVAL_S)
        await follower.stop()
    return FactReplayReport(
        topic=topics.audit_facts,
        records_applied=follower.records_applied,
        records_refused=follower.records_refused,
        gaps=follower.gaps,
        seconds=round(time.monotonic() - started, 3),
        entries=len(index),
        evictions=dict(index.evictions),
        streams=index.scope_sizes(),
    )


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    report = asyncio.run(replay_facts(settings))
    if args.output is not OutputFormat.TABLE:
        print(document(report.model_dump(mode="json"), args.output))
        return ExitCode.OK
    print(
        f"{report.topic}: {report.records_applied} records applied in {report.seconds:.1f}s, "
        f"{report.records_refused} refused, {report.gaps} gaps, {report.entries} index entries, "
        f"evictions per_type={report.evictions['per_type']} total={report.evictions['total']}"
    )
    width = max((len(name) for name in report.streams), default=6)
    print(f"{'STREAM':<{width}}  ENTRIES")
    for name, count in report.streams.items():
        print(f"{name:<{width}}  {count}")
    return ExitCode.OK
