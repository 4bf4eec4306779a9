"""`reverser replay watch-events`: route one target's retained watch history into branch-work for another.

A target added for a cluster that another target already mirrors starts with nothing but its
first snapshot. This command reads the watch events of the source target still on
`<prefix>.watch-events`, re-addresses each to the new target, keeps what the new target's rules
select (`pipeline.targetrules`: types, namespaces, label selectors; a snapshot keeps its selected
objects and its end counts them), and appends the branch-work records the router would have
written for it, in log order per input partition.

Authors are resolved as the router resolves them: the fact index is rebuilt from
`<prefix>.audit-facts` by the router's own follower and resolver (`index_lookup`), so while the
facts of the replayed changes are retained, the new target's commits carry the authors the live
pipeline gave the source target's; changes whose facts aged out are UNRESOLVED (an unknown author,
never the committer), as the router would have said.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from pipeline.codec import DecodeError
from pipeline.codec.branch_work import Removal, WorkAuthor, work_record
from pipeline.codec.watch_event import LiveEvent, SnapshotChunk, SnapshotEnd, WatchRecord, decode_watch_event
from pipeline.commandline import add_config_argument, settings_from_args
from pipeline.config import Settings
from pipeline.exitcodes import ExitCode, usage_error
from pipeline.kube.selector import SelectorError
from pipeline.log import open_log
from pipeline.log.api import PendingRecord
from pipeline.log.scan import extent_of, read_to_end
from pipeline.log.topics import TopicNames
from pipeline.progress import ProgressReport
from pipeline.router.component import destinations, index_lookup
from pipeline.router.events import CaughtUp, Destination, work_items
from pipeline.router.lookup import IndexLookup, Needs, needs
from pipeline.targetrules import TargetRules

__all__ = ["ReplayWatchError", "add_replay_watch_parser", "replay_watch_events"]

APPEND_BATCH = 500


class ReplayWatchError(Exception):
    """The replay cannot start; the message names the argument."""


def add_replay_watch_parser(kinds: Any) -> None:
    """Registered under `reverser replay` (see `pipeline.replay`)."""
    parser = kinds.add_parser(
        "watch-events", help="route one target's retained watch history into branch-work for a new target"
    )
    add_config_argument(parser, reads_existing_log=True)
    parser.add_argument("--from-target", required=True, help="target whose watch events are replayed")
    parser.add_argument("--target", required=True, help="configured target that receives the work")
    parser.set_defaults(func=_run)


def _labels(object_json: bytes) -> dict[str, str]:
    """metadata.labels of a sanitized snapshot object (live events carry theirs)."""
    try:
        labels = json.loads(object_json).get("metadata", {}).get("labels") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _for_target(watch: WatchRecord, target: str) -> WatchRecord:
    """`watch` as if its stream belonged to `target` (a replay into another target)."""
    stream = dataclasses.replace(watch.stream, target=target)
    return dataclasses.replace(watch, head=dataclasses.replace(watch.head, stream=stream))


class _Narrowing:
    """The new target's rules applied to the source's records; snapshot ends count what was kept."""

    def __init__(self, rules: TargetRules) -> None:
        self._rules = rules
        # objects kept per snapshot (stream and epoch), for its end's count
        self._kept: dict[tuple[str, str, str, str, int], int] = {}
        self.dropped = 0

    def narrow(self, watch: WatchRecord) -> WatchRecord | None:
        rules, gr, body = self._rules, watch.stream.group_resource, watch.body
        if isinstance(body, LiveEvent):
            if rules.selects(gr, body.namespace, body.labels):
                return watch
            self.dropped += 1
            return None
        if not rules.covers(gr, watch.stream.scope):
            self.dropped += 1
            return None
        if isinstance(body, SnapshotChunk):
            kept = tuple(o for o in body.objects if rules.selects(gr, o.namespace, _labels(o.object_json)))
            stream = (watch.stream.cluster, gr.group, gr.resource, watch.stream.scope, body.epoch)
            self._kept[stream] = self._kept.get(stream, 0) + len(kept)
            self.dropped += len(body.objects) - len(kept)
            return dataclasses.replace(watch, body=dataclasses.replace(body, objects=kept))
        if isinstance(body, SnapshotEnd):
            stream = (watch.stream.cluster, gr.group, gr.resource, watch.stream.scope, body.epoch)
            kept_count = self._kept.pop(stream, 0)
            return dataclasses.replace(watch, body=dataclasses.replace(body, objects=kept_count))
        return watch


async def _work(lookup: IndexLookup, watch: WatchRecord, where: Destination) -> list[PendingRecord]:
    """The branch-work records of one watch record, resolved as the router resolves them."""
    author: WorkAuthor | None = None
    caught_up: list[CaughtUp] = []
    removals: list[Removal] | None = None
    need = needs(watch, where.attribution)
    if need is Needs.AUTHOR:
        author = await lookup.author_for(watch)
    elif need is Needs.CATCH_UP:
        caught_up = await lookup.catch_up(watch)
    elif need is Needs.REMOVALS:
        removals = await lookup.removals_for(watch)
    return [work_record(item) for item in work_items(watch, where, author, caught_up, removals)]


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
    configured = next(t for t in settings.targets if t.name == target)
    try:
        narrowing = _Narrowing(TargetRules.of(configured))
    except SelectorError as exc:
        raise ReplayWatchError(f"targets[{target}].rules: label_selector: {exc}") from None
    names = TopicNames.for_prefix(settings.log.topic_prefix)
    written = skipped = other_cluster = 0
    async with open_log(settings) as log:
        follower, lookup = index_lookup(settings, log)
        await follower.start()
        try:
            await lookup.wait_ready()
            extent = await extent_of(log, names.watch_events)
            with ProgressReport(f"replaying {names.watch_events}", extent.total, tty=tty) as report:
                async for chunk in read_to_end(log, extent):
                    for gap in chunk.gaps:
                        report.note(
                            f"warning: {gap.lost} watch event(s) of {gap.topic}[{gap.partition}] "
                            "were deleted by retention before the replay"
                        )
                    watches: list[WatchRecord] = []
                    for record in chunk.records:
                        report.advance()
                        try:
                            watch = decode_watch_event(record)
                        except DecodeError:
                            skipped += 1
                            continue
                        if watch.stream.target != source:
                            continue
                        if watch.stream.cluster != configured.cluster:
                            other_cluster += 1
                            continue
                        narrowed = narrowing.narrow(_for_target(watch, target))
                        if narrowed is not None:
                            watches.append(narrowed)
                    # resolved concurrently, like the router; appended in log order
                    out = [
                        r
                        for records in await asyncio.gather(*(_work(lookup, w, where) for w in watches))
                        for r in records
                    ]
                    for start in range(0, len(out), APPEND_BATCH):
                        await log.append_many(names.branch_work, out[start : start + APPEND_BATCH])
                    written += len(out)
        finally:
            await follower.stop()
    if skipped:
        note(f"warning: {skipped} undecodable watch event(s) skipped")
    if other_cluster:
        note(
            f"warning: {other_cluster} watch event(s) of {source} come from another cluster than "
            f"{target}'s ({configured.cluster}); skipped"
        )
    if narrowing.dropped:
        note(
            f"{narrowing.dropped} object(s) or event(s) of {source} are outside {target}'s rules; "
            "not replayed"
        )
    note(
        f"appended {written} branch-work record(s) for {target} ({where.provider} {where.branch}) "
        f"from the watch events of {source}"
    )
    return written


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        asyncio.run(replay_watch_events(settings, args.from_target, args.target))
    except ReplayWatchError as exc:
        raise usage_error(str(exc)) from None
    return ExitCode.OK
