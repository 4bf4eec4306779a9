"""`reverser watch-rules`: which streams the configured watch rules resolve to, and why not.

It asks each source cluster's discovery, exactly as the service does, so an operator can see an
unknown, ambiguous or excluded resource (and Secrets being left out) before starting the service.
`--discovery FILE` resolves against recorded discovery instead (`pipeline.watch.discovery_file`),
for every target, so rules can be checked where no cluster answers: in CI, or in the demo.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.commandline import add_config_argument, settings_from_args
from pipeline.config import ClusterSettings, Settings
from pipeline.exitcodes import CommandError, ExitCode, usage_error
from pipeline.kube.client import UNREACHABLE, ApiResource, KubeError, open_client
from pipeline.kube.kubeconfigsecret import with_kubeconfig_secrets
from pipeline.tables import OutputFormat, add_output_argument, document
from pipeline.watch.discovery_file import read_discovery
from pipeline.watch.resolve import RuleProblem, StreamSpec, resolve_target

__all__ = ["register", "resolve_all"]


async def resolve_all(
    settings: Settings, recorded: Mapping[tuple[str, str], ApiResource] | None = None
) -> tuple[list[StreamSpec], list[RuleProblem]]:
    """Streams and rule problems for every target, one discovery per source cluster; with `recorded`,
    every target is resolved against it and no cluster is asked (nor needs configuring)."""
    clusters = {c.name: c for c in settings.clusters}
    specs: list[StreamSpec] = []
    problems: list[RuleProblem] = []
    if recorded is not None:
        for target in settings.targets:
            if target.rules:
                cluster = clusters.get(target.cluster) or ClusterSettings(name=target.cluster)
                target_specs, target_problems = resolve_target(target, cluster, recorded)
                specs.extend(target_specs)
                problems.extend(target_problems)
        return specs, problems
    discovered: dict[str, Any] = {}
    factory = with_kubeconfig_secrets(open_client, settings.resources_cluster if settings.clusters else None)
    for name in sorted({t.cluster for t in settings.targets if t.rules and t.cluster in clusters}):
        client = await factory(clusters[name])
        try:
            discovered[name] = await client.discover()
        except KubeError as exc:
            discovered[name] = exc
        finally:
            await client.close()
    for target in settings.targets:
        if not target.rules:
            continue
        found = discovered.get(target.cluster)
        if found is None:
            problems.append(
                RuleProblem(target.name, 0, "*", "UnknownCluster", f"no cluster {target.cluster!r}")
            )
        elif isinstance(found, KubeError):
            if found.unreachable:
                problems.append(RuleProblem(target.name, 0, "*", UNREACHABLE, found.message))
            else:
                problems.append(RuleProblem(target.name, 0, "*", "DiscoveryFailed", str(found)))
        else:
            target_specs, target_problems = resolve_target(target, clusters[target.cluster], found)
            specs.extend(target_specs)
            problems.extend(target_problems)
    return specs, problems


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("watch-rules")
    add_config_argument(parser)
    add_output_argument(parser)
    parser.add_argument(
        "--discovery",
        type=Path,
        metavar="FILE",
        help="resolve against recorded API discovery (APIResourceList documents, as `kubectl get "
        "--raw /api/v1` prints them) instead of asking the clusters",
    )
    parser.set_defaults(func=_run)


# With custom resources the rules come from the config topic; that view lives with them.
_CUSTOM_RESOURCES_VIEW = "pipeline.customresources.rules_cli:run"


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if settings.custom_resources.enabled:
        if args.discovery is not None:
            raise usage_error(
                "--discovery does not apply with custom_resources.enabled: the rules "
                "come from the clusters' custom resources"
            )
        module_name, _, attr = _CUSTOM_RESOURCES_VIEW.partition(":")
        view: Any = getattr(importlib.import_module(module_name), attr)
        code: int = view(args, settings)
        return code
    recorded = read_discovery(args.discovery) if args.discovery is not None else None
    specs, problems = asyncio.run(resolve_all(settings, recorded))
    unreachable = next((p for p in problems if p.reason == UNREACHABLE), None)
    if unreachable is not None:
        cluster = next(t.cluster for t in settings.targets if t.name == unreachable.target)
        raise CommandError(
            f"apiserver of cluster {cluster} unreachable "
            f"({unreachable.message.removeprefix(cluster + ': ')}): "
            "check the server address in its kubeconfig and that the apiserver is up",
            ExitCode.UNAVAILABLE,
        )
    if args.output is not OutputFormat.TABLE:
        print(
            document(
                {
                    "streams": [
                        {
                            "target": s.stream.target,
                            "cluster": s.stream.cluster,
                            "group": s.stream.group,
                            "version": s.stream.version,
                            "resource": s.stream.resource,
                            "scope": s.stream.scope,
                            "labelSelector": s.label_selector,
                        }
                        for s in specs
                    ],
                    "problems": [
                        {
                            "target": p.target,
                            "rule": p.rule,
                            "resource": p.resource,
                            "reason": p.reason,
                            "message": p.message,
                        }
                        for p in problems
                    ],
                },
                args.output,
            )
        )
    else:
        print(f"{'TARGET':<20} {'CLUSTER':<12} {'RESOURCE':<40} {'SCOPE':<20} SELECTOR")
        for spec in specs:
            s = spec.stream
            resource = f"{s.group}/{s.version}/{s.resource}" if s.group else f"{s.version}/{s.resource}"
            scope = s.scope or "(all)"
            print(f"{s.target:<20} {s.cluster:<12} {resource:<40} {scope:<20} {spec.label_selector}")
        if problems:
            print(file=sys.stdout)
            print(f"{'TARGET':<20} {'RULE':<5} {'ENTRY':<30} {'REASON':<18} MESSAGE")
            for p in problems:
                print(f"{p.target:<20} {p.rule:<5} {p.resource:<30} {p.reason:<18} {p.message}")
    return ExitCode.FINDINGS if problems else ExitCode.OK
