"""How long `reverser --help` and `reverser --version` take to start, against `python -c pass`.

A help screen or a typo should cost what starting the interpreter costs, not the seconds that
importing every stage (aiokafka, aiohttp, the Kubernetes client, pydantic) takes: `pipeline.cli`
imports only the chosen subcommand's package. Figures: the median wall time of ROUNDS runs of each
command in a fresh process, and its ratio against the median of `python -c pass` in the same run.
The budget is `BUDGET_S` for `--help`, the machine's interpreter start included.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = int(os.environ.get("BENCH_CLI_ROUNDS", "15"))
BUDGET_S = 0.5
REVERSER = Path(sys.executable).with_name("reverser")


def _median_s(argv: list[str]) -> float:
    times: list[float] = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    baseline = _median_s([sys.executable, "-c", "pass"])
    print(f"python -c pass       {baseline * 1000:7.1f} ms (baseline)")
    for args in (["--help"], ["--version"], ["lag", "--help"]):
        took = _median_s([str(REVERSER), *args])
        verdict = ""
        if args == ["--help"]:
            verdict = "  within budget" if took < BUDGET_S else "  OVER BUDGET"
        name = " ".join(args)
        print(f"reverser {name:<12}{took * 1000:7.1f} ms  {took / baseline:5.1f}x baseline{verdict}")


if __name__ == "__main__":
    main()
