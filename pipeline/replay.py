"""`reverser replay KIND`: rebuild state from the topics, with progress.

`branch` (the commit worker's Git branch from `<prefix>.object-state` or `<prefix>.branch-work`),
`facts` (the fact index from `<prefix>.audit-facts`) and `watch-events` (a new target's
branch-work from another target's watch history) are each implemented by the package that owns
that state.
"""

from __future__ import annotations

from typing import Any

from pipeline.attribution.replay_cli import add_replay_facts_parser
from pipeline.commit.replay_cli import add_replay_branch_parser
from pipeline.router.replay_cli import add_replay_watch_parser
from pipeline.service.objects import ClusterObjects


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("replay")
    kinds = parser.add_subparsers(dest="replay_kind", required=True, metavar="KIND")
    add_replay_branch_parser(kinds, ClusterObjects)
    add_replay_facts_parser(kinds)
    add_replay_watch_parser(kinds)
