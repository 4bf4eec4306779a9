"""`reverser watch-rules` with custom resources: the published configuration read back from the log.

It shows what the objects' status shows (the same `resolve_rules`): each rule item's streams, and
for an item without one the reason (unknown resource, Secret excluded, forbidden, ...), plus
the objects left out with their errors.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from pipeline.config import Settings
from pipeline.customresources.follower import ConfigFollower
from pipeline.customresources.state import ConfigState
from pipeline.customresources.status import RuleStreams, resolve_rules
from pipeline.kube.client import ApiResource, KubeClient, KubeError, open_client
from pipeline.kube.kubeconfigsecret import KubeconfigSecretError, with_kubeconfig_secrets
from pipeline.log import open_log
from pipeline.log.topics import TopicNames
from pipeline.tables import OutputFormat, document

__all__ = ["run"]


async def _published(settings: Settings) -> ConfigState | None:
    log = open_log(settings)
    await log.start()
    try:
        follower = ConfigFollower(log, TopicNames.for_prefix(settings.log.topic_prefix).config)
        try:
            return await follower.catch_up()
        finally:
            await follower.close()
    finally:
        await log.close()


async def _resolve(state: ConfigState, settings: Settings) -> dict[Any, list[RuleStreams]]:
    clients: dict[str, KubeClient] = {}
    effective = state.settings(settings)  # with the clusters ClusterProviders change or add
    factory = with_kubeconfig_secrets(open_client, settings.resources_cluster)

    async def discover(cluster: str) -> dict[tuple[str, str], ApiResource]:
        if cluster not in clients:
            try:
                clients[cluster] = await factory(next(c for c in effective.clusters if c.name == cluster))
            except KubeconfigSecretError as exc:
                raise KubeError(0, "ClientConfig", str(exc)) from exc
        return await clients[cluster].discover()

    try:
        return await resolve_rules(state.compiled, effective, discover, clients.__getitem__)
    finally:
        for client in clients.values():
            await client.close()


def run(args: argparse.Namespace, settings: Settings) -> int:
    state = asyncio.run(_published(settings))
    if state is None:
        print("no configuration published yet (is the controller running and elected?)")
        return 1
    rules = asyncio.run(_resolve(state, settings))
    errors = state.compiled.errors
    problems = [
        (ref, entry, p) for ref, entries in sorted(rules.items()) for entry in entries for p in entry.problems
    ]
    if args.output is not OutputFormat.TABLE:
        print(
            document(
                {
                    "version": state.version,
                    "rules": [
                        {
                            "object": ref.describe(),
                            "item": entry.item,
                            "streams": list(entry.streams),
                            "problems": [
                                {"resource": r, "reason": why, "message": m} for r, why, m in entry.problems
                            ],
                        }
                        for ref, entries in sorted(rules.items())
                        for entry in entries
                    ],
                    "errors": [
                        {"object": ref.describe(), "field": e.path, "message": e.message} for ref, e in errors
                    ],
                },
                args.output,
            )
        )
    else:
        print(f"configuration version {state.version}")
        print(f"{'OBJECT':<40} {'ITEM':<5} STREAM")
        for ref, entries in sorted(rules.items()):
            for entry in entries:
                for stream in entry.streams:
                    print(f"{ref.describe():<40} {entry.item:<5} {stream}")
        if problems:
            print()
            print(f"{'OBJECT':<40} {'ITEM':<5} {'ENTRY':<24} {'REASON':<18} MESSAGE")
            for ref, entry, (resource, reason, message) in problems:
                print(f"{ref.describe():<40} {entry.item:<5} {resource:<24} {reason:<18} {message}")
        for ref, error in errors:
            print(f"{ref.describe()}: error: {error.describe()}")
    return 1 if problems or errors else 0
