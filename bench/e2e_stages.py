"""Where the time of `bench e2e` goes: the replicas' stage metrics, sampled during and after a run.

Summed over the three replicas: commit windows closed by reason, commits and pushes, the
attribution wait and the commit worker's watch-to-push histograms (as bucket-bound quantiles), and
the highest consumer lag per group and the most router work in flight seen while the run went on.
A backlog shows as lag that grows with the run; a window that does not close shows as few
`silence` closes with low lag.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from dataclasses import dataclass, field

from tests.e2e.service_process import ServiceProcess

__all__ = ["StageSampler", "stage_report"]

SAMPLE_INTERVAL_S = 2.0


def _samples(replicas: list[ServiceProcess], name: str) -> list[tuple[dict[str, str], float]]:
    found: list[tuple[dict[str, str], float]] = []
    for replica in replicas:
        try:
            found.extend(replica.metric_samples(name))
        except OSError:
            continue
    return found


def _by(replicas: list[ServiceProcess], name: str, label: str) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for labels, value in _samples(replicas, name):
        totals[labels.get(label, "")] += value
    return dict(totals)


def _quantile(replicas: list[ServiceProcess], name: str, q: float) -> str:
    """The upper bucket bound holding quantile `q` of a histogram summed over replicas and labels."""
    buckets: dict[float, float] = defaultdict(float)
    for labels, value in _samples(replicas, f"{name}_bucket"):
        buckets[float(labels["le"])] += value
    if not buckets or buckets[math.inf] == 0:
        return "n/a"
    total = buckets[math.inf]
    for bound in sorted(buckets):
        if buckets[bound] >= q * total:
            return f"<= {bound:g} s" if bound != math.inf else "> last bucket"
    return "n/a"


@dataclass
class StageSampler:
    """Polls the replicas while the workload runs: peak lag per group and peak router in-flight."""

    replicas: list[ServiceProcess]
    peak_lag: dict[str, float] = field(default_factory=dict)
    peak_in_flight: float = 0.0
    lag_trace: list[float] = field(default_factory=list)

    def sample(self) -> None:
        lag = _by(self.replicas, "reverser_consumergroup_lag", "group")
        # Every replica's monitor reports the same groups; the highest report is the freshest.
        for group, value in lag.items():
            per_replica = value / max(1, sum(1 for r in self.replicas if r.pid is not None))
            self.peak_lag[group] = max(self.peak_lag.get(group, 0.0), per_replica)
        self.lag_trace.append(sum(lag.values()))
        in_flight = sum(v for _, v in _samples(self.replicas, "reverser_router_in_flight"))
        self.peak_in_flight = max(self.peak_in_flight, in_flight)

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(SAMPLE_INTERVAL_S)


def stage_report(sampler: StageSampler) -> list[str]:
    replicas = sampler.replicas
    closes = _by(replicas, "reverser_commit_window_closes_total", "reason")
    pushes = _by(replicas, "reverser_commit_pushes_total", "result")
    commits = sum(_by(replicas, "reverser_commit_commits_total", "provider").values())
    lag = ", ".join(f"{g.rsplit('.', 1)[-1]} {v:.0f}" for g, v in sorted(sampler.peak_lag.items()))
    return [
        "  stages (3 replicas summed):",
        f"    commit windows closed: {', '.join(f'{k} {v:.0f}' for k, v in sorted(closes.items()))};"
        f" commits {commits:.0f}; pushes {', '.join(f'{k} {v:.0f}' for k, v in sorted(pushes.items()))}",
        "    attribution wait p50 "
        f"{_quantile(replicas, 'reverser_attribution_resolution_wait_seconds', 0.5)}, p99 "
        f"{_quantile(replicas, 'reverser_attribution_resolution_wait_seconds', 0.99)}",
        "    watch -> router transaction committed p50 "
        f"{_quantile(replicas, 'reverser_router_emit_delay_seconds', 0.5)}, p99 "
        f"{_quantile(replicas, 'reverser_router_emit_delay_seconds', 0.99)}",
        "    watch -> commit worker takes the record p50 "
        f"{_quantile(replicas, 'reverser_commit_receive_delay_seconds', 0.5)}, p99 "
        f"{_quantile(replicas, 'reverser_commit_receive_delay_seconds', 0.99)}",
        "    watch -> push of the window's first write p50 "
        f"{_quantile(replicas, 'reverser_commit_end_to_end_seconds', 0.5)}, p99 "
        f"{_quantile(replicas, 'reverser_commit_end_to_end_seconds', 0.99)}",
        f"    peak consumer lag (records): {lag or 'n/a'};"
        f" peak router in flight {sampler.peak_in_flight:.0f}",
    ]
