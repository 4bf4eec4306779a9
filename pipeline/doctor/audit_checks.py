"""Doctor checks of each audit route: did facts from it reach the log recently, and where the
admin finds the webhook configuration the apiserver needs (`reverser doctor --audit-setup`).

A route that never delivers facts is the quietest misconfiguration there is (no audit policy, a
webhook pointing at another route, a rejected client certificate): every commit then names the
committer instead of the person, and nothing else fails.
"""

from __future__ import annotations

import time

from pipeline.config import Settings
from pipeline.doctor.audit_setup import route_url
from pipeline.doctor.report import Check, Status
from pipeline.log import Log, LogError
from pipeline.log.scan import extent_of, read_to_end
from pipeline.log.topics import TopicNames
from pipeline.models import route_of_stream_key

__all__ = ["SCAN_RECORDS", "check_routes", "latest_fact_ms"]

AREA = "audit"
# Records read from the end of each fact partition to find each route's newest fact.
SCAN_RECORDS = 2000
FETCH_TIMEOUT_MS = 1000


async def latest_fact_ms(log: Log, settings: Settings) -> dict[str, int]:
    """Route -> append time of its newest fact among the last SCAN_RECORDS of each partition."""
    topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
    latest: dict[str, int] = {}
    extent = await extent_of(log, topic)
    chunks = read_to_end(log, extent, tail=SCAN_RECORDS, timeout_ms=FETCH_TIMEOUT_MS, idle_fetches=1)
    async for chunk in chunks:
        for record in chunk.records:
            if record.key is None:
                continue
            route = route_of_stream_key(record.key)
            latest[route] = max(latest.get(route, 0), record.timestamp_ms)
    return latest


async def check_routes(settings: Settings, log: Log, *, recent_s: float, base_url: str) -> list[Check]:
    """One check per route: facts within `recent_s`, else a failure that says what to set up."""
    try:
        latest = await latest_fact_ms(log, settings)
    except LogError as exc:
        return [
            Check(
                area=AREA,
                subject="*",
                check="facts arriving",
                status=Status.FAIL,
                detail=str(exc),
                fix="the log checks above say why the fact topic cannot be read",
            )
        ]
    now_ms = time.time() * 1000
    checks: list[Check] = []
    for route in settings.audit.routes:
        url = route_url(base_url, route.name)
        checks.append(
            Check(
                area=AREA,
                subject=route.name,
                check="webhook",
                status=Status.INFO,
                detail=f"the apiserver posts to {url}; `reverser doctor --audit-setup` prints its "
                "kubeconfig, audit policy and flags",
            )
        )
        newest = latest.get(route.name)
        if newest is None:
            checks.append(
                Check(
                    area=AREA,
                    subject=route.name,
                    check="facts arriving",
                    status=Status.FAIL,
                    detail=f"no facts on this route within the fact topic's retention "
                    f"({settings.attribution.ttl_s:g} s)",
                    fix=f"point the apiserver's audit webhook at {url} with an audit policy that logs "
                    f"writes: `reverser doctor --audit-setup` prints the kubeconfig, policy and flags "
                    f"(a quiet cluster has no facts either: make a change and run doctor again)",
                )
            )
            continue
        age_s = max(0.0, (now_ms - newest) / 1000)
        if age_s > recent_s:
            checks.append(
                Check(
                    area=AREA,
                    subject=route.name,
                    check="facts arriving",
                    status=Status.WARN,
                    detail=f"newest fact is {age_s:.0f} s old (more than {recent_s:g} s)",
                    fix=f"if the cluster did change since, check the apiserver still posts to {url}",
                )
            )
        else:
            checks.append(
                Check(
                    area=AREA,
                    subject=route.name,
                    check="facts arriving",
                    status=Status.OK,
                    detail=f"newest fact {age_s:.0f} s ago",
                )
            )
    return checks
