"""`reverser replay branch`: rebuild one Git branch from `<prefix>.branch-work`, from the beginning.

Every work record stores its resolved author, so replaying the branch's FIFO into an empty remote
reproduces the same trees and authors (commit SHAs differ only by the committer date). Windows
close on the records' own observation times, exactly as they did live.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.codec import DecodeError
from pipeline.commit.access import provider_access
from pipeline.commit.branch import BranchWorker, Offset
from pipeline.commit.consumer import remote_auth
from pipeline.commit.gitrepo import GitRemoteError, LocalRepo, redact_url
from pipeline.commit.work import decode_work
from pipeline.config import ProviderSettings, Settings
from pipeline.gitnames import GitNameError, check_branch_name, check_remote_url, origin_of
from pipeline.log import LogError, open_log
from pipeline.log.api import TopicPartition
from pipeline.log.topics import TopicNames
from pipeline.models import branch_key
from pipeline.service.cli import add_config_argument, settings_from_args

__all__ = ["add_replay_branch_parser", "replay_branch"]

PUSH_EVERY_RECORDS = 2000
PROGRESS_EVERY_RECORDS = 1000


class ReplayError(Exception):
    """The replay cannot start or finish; the message says why."""


def add_replay_branch_parser(kinds: Any) -> None:
    """Registered under `reverser replay` (see `pipeline.replay`)."""
    branch = kinds.add_parser("branch", help="rebuild a Git branch from branch-work into an empty remote")
    add_config_argument(branch)
    branch.add_argument("--provider", required=True, help="provider name from the configuration")
    branch.add_argument("--branch", required=True, help="branch to rebuild")
    branch.add_argument(
        "--into",
        help="empty remote to write to: a URL, or a directory (a bare repository is created there); "
        "default: the provider's own URL",
    )
    branch.set_defaults(func=_run)


def _target_url(into: str | None, provider: ProviderSettings) -> str:
    if into is None:
        return provider.url
    try:
        check_remote_url(into)
    except GitNameError as exc:
        raise ReplayError(f"--into: {exc}") from None
    if "://" in into or into.startswith("git@"):
        return into
    path = Path(into)
    if not (path / "HEAD").exists():
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return str(path.resolve())


async def replay_branch(
    settings: Settings,
    provider_name: str,
    branch: str,
    into: str | None,
    progress: Callable[[str], object] = print,
) -> int:
    """Replay the branch's work records into `into`; returns the number of commits made."""
    try:
        provider = settings.provider(provider_name)
    except KeyError:
        raise ReplayError(f"unknown provider {provider_name!r}") from None
    try:
        check_branch_name(branch)
    except GitNameError as exc:
        raise ReplayError(f"--branch: {exc}") from None
    url = _target_url(into, provider)
    target = provider.model_copy(update={"url": url})
    auth = remote_auth(provider) if into is None or _same_origin(url, provider.url) else None
    topic = TopicNames.for_prefix(settings.log.topic_prefix).branch_work
    key = branch_key(provider_name, branch)
    log = open_log(settings)
    await log.start()
    try:
        partitions = await log.partitions_for(topic)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        starts = await log.beginning_offsets(tps)
        ends = await log.end_offsets(tps)
        total = sum(ends[tp] - starts[tp] for tp in tps)
        with tempfile.TemporaryDirectory(prefix="reverser-replay-") as clones:
            access = provider_access(target, auth, Path(clones) / "keys")
            repo = access.clone(Path(clones), provider_name, branch, url)
            settled: list[Offset] = []
            worker = BranchWorker(settings, target, branch, repo, settled.extend)
            await worker.sync()
            if worker.remote_tip is not None:
                where = redact_url(url)
                raise ReplayError(f"{branch} already exists on {where}; replay needs an empty remote")
            reader = log.reader()
            await reader.assign({tp: starts[tp] for tp in tps})
            seen = used = 0
            remaining = {tp for tp in tps if ends[tp] > starts[tp]}
            while remaining:
                fetched = await reader.fetch(timeout_ms=1000, max_records=1000)
                for gap in fetched.gaps:
                    lost = f"{gap.lost} record(s) of {gap.topic}[{gap.partition}]"
                    progress(f"warning: {lost} were deleted by retention before the replay")
                for record in fetched.records:
                    tp = TopicPartition(record.topic, record.partition)
                    if record.offset >= ends[tp]:
                        remaining.discard(tp)
                        continue
                    seen += 1
                    if record.offset + 1 >= ends[tp]:
                        remaining.discard(tp)
                    if record.key != key:
                        continue
                    try:
                        item = decode_work(record)
                    except DecodeError as exc:
                        progress(f"warning: {tp}@{record.offset} undecodable, skipped: {exc}")
                        continue
                    await worker.handle(item)
                    used += 1
                    if used % PUSH_EVERY_RECORDS == 0:
                        await worker.push()
                    if seen % PROGRESS_EVERY_RECORDS == 0:
                        progress(f"replayed {seen}/{total} records ({used} for {branch})")
                for tp in list(remaining):
                    if reader.position(tp) >= ends[tp]:
                        remaining.discard(tp)
            await reader.close()
            pushed = await worker.stop()
            commits = _count_commits(repo, worker.tip)
            repo.close()
            if not pushed:
                raise ReplayError(f"the final push to {redact_url(url)} failed; see the log above")
            progress(
                f"replayed {seen}/{total} records ({used} for {branch}): {commits} commit(s) on {branch}"
            )
            return commits
    finally:
        await log.close()


def _same_origin(url: str, provider_url: str) -> bool:
    """Whether the provider's credentials may go to `url`: same scheme, host and port only."""
    origin = origin_of(url)
    return origin is not None and origin == origin_of(provider_url)


def _count_commits(repo: LocalRepo, tip: str | None) -> int:
    count = 0
    sha = tip
    while sha:
        count += 1
        parents = repo.read_commit(sha).parents
        sha = parents[0] if parents else None
    return count


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        asyncio.run(replay_branch(settings, args.provider, args.branch, args.into))
    except (ReplayError, GitRemoteError) as exc:
        print(f"reverser replay: {exc}", file=sys.stderr)
        return 1
    except LogError as exc:
        print(f"reverser replay: log unavailable: {exc}", file=sys.stderr)
        return 1
    return 0
