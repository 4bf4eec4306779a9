"""`python -m bench [NAME ...]`: run every `bench/bench_<name>.py` (or the named ones) in turn.

Each module exposes `main() -> None`, prints its own figures and the baseline it is compared to.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def available() -> list[str]:
    return sorted(
        info.name.removeprefix("bench_")
        for info in pkgutil.iter_modules(bench.__path__)
        if info.name.startswith("bench_")
    )


def run(names: list[str]) -> int:
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(available())}")
        return 2
    for name in names or available():
        print(f"\n=== bench {name} ===", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"bench.bench_{name}").main()
        print(f"--- {name} took {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
