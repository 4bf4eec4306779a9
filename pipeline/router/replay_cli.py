"""`reverser replay watch-events`: route one target's retained watch history into branch-work for another.

A target added for a cluster that another target already mirrors starts with nothing but its
first snapshot. This command reads the watch events of the source target still on
`<prefix>.watch-events`, re-addresses each to the new target and appends the branch-work records
the router would have written for it, in log order per input partition, so the new target's
branch gets the same change history (as far as retention kept it). Authors are not resolved
again (the audit facts aged out long ago): the records carry `NOT_ATTEMPTED`, so these commits are
the committer's. Filtering by the new target's rules is not applied: use it for a target that
watches the same collections (for example the same cluster on another branch or path).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from pipeline.codec import DecodeError
from pipeline.codec.branch_work import work_record
from pipeline.codec.watch_event import decode_watch_event
from pipeline.commandline import add_config_argument, settings_from_args
from pipeline.config import Settings
from pipeline.exitcodes import ExitCode, usage_error
from pipeline.log import open_log
from pipeline.log.api import PendingRecord, TopicPartition
from pipeline.log.topics import TopicNames
from pipeline.progress import ProgressReport
from pipeline.router.component import destinations
from pipeline.router.events import work_item

__all__ = ["add_replay_watch_parser", "replay_watch_events"]

APPEND_BATCH = 500


class ReplayWatchError(Exception):
    """The replay cannot start; the message names the argument."""


def add_replay_watch_parser(kinds: Any) -> None:
    """Registered under `reverser replay` (see `pipeline.replay`)."""
    parser = kinds.add_parser(
        "watch-events", help="route one target's retained watch history into branch-work for a new target"
    )
    add_config_argument(parser)
    parser.add_argument("--from-target", required=True, help="target whose watch events are replayed")
    parser.add_argument("--target", required=True, help="configured target that receives the work")
    parser.set_defaults(func=_run)


async def replay_watch_events(
    settings: Settings,
    source: str,
    target: str,
    note: Callable[[str], object] = print,
    *,
    tty: bool | None = None,
) -> int:
    """Append branch-work for `target` from `source`'s watch events; returns the records written."""
    where = destinations(settings).get(target)
    if where is None:
        raise ReplayWatchError(f"--target: {target!r} is not a configured target")
    if source == target:
        raise ReplayWatchError("--from-target and --target must differ")
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    log = open_log(settings)
    await log.start()
    written = skipped = 0
    try:
        partitions = await log.partitions_for(names.watch_events)
        tps = [TopicPartition(names.watch_events, p) for p in range(partitions)]
        starts = await log.beginning_offsets(tps)
        ends = await log.end_offsets(tps)
        reader = log.reader()
        await reader.assign(dict(starts))
        out: list[PendingRecord] = []
        try:
            with ProgressReport(f"replaying {names.watch_events}", sum(ends[t] - starts[t] for t in tps),
                                tty=tty) as report:
                while any(reader.position(tp) < ends[tp] for tp in tps):
                    fetched = await reader.fetch(timeout_ms=1000, max_records=1000)
                    for gap in fetched.gaps:
                        report.note(f"warning: {gap.lost} watch event(s) of {gap.topic}[{gap.partition}] "
                                    "were deleted by retention before the replay")
                    for record in fetched.records:
                        if record.offset >= ends[TopicPartition(record.topic, record.partition)]:
                            continue
                        report.advance()
                        try:
                            watch = decode_watch_event(record)
                        except DecodeError:
                            skipped += 1
                            continue
                        if watch.target != source:
                            continue
                        item = work_item(dataclasses.replace(watch, target=target), where, None)
                        out.append(work_record(item))
                    if len(out) >= APPEND_BATCH:
                        await log.append_many(names.branch_work, out)
                        written += len(out)
                        out = []
                if out:
                    await log.append_many(names.branch_work, out)
                    written += len(out)
        finally:
            await reader.close()
    finally:
        await log.close()
    if skipped:
        note(f"warning: {skipped} undecodable watch event(s) skipped")
    note(f"appended {written} branch-work record(s) for {target} ({where.provider} {where.branch}) "
         f"from the watch events of {source}")
    return written


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        asyncio.run(replay_watch_events(settings, args.from_target, args.target))
    except ReplayWatchError as exc:
        raise usage_error(str(exc)) from None
    return ExitCode.OK
