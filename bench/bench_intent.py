"""The in-place writer against today's canonical writer, on a 5,000-file repository.

The repository holds 50 namespaces x 100 ConfigMaps, one file each, as people keep them: a comment
line on top, then the object. A stream of changes each bumps one ConfigMap's data. Baseline: the
canonical writer, which renders the whole object as the file (`render_object`). Measured: the
in-place writer, which finds the object's home in the folder's index and applies the change as a
round-trip edit of its document (`plan_change`), so comments and layout survive. The index is built
once per branch sync; its cost is printed per file, against reading the same files with PyYAML.

Then the wired writer: the same stream of live changes through `BranchWorker.handle` (decode,
window with W=0, placement, commit), in commits per second, on the 5,000-file repository laid out
canonically (the baseline: today's writer, one canonical file per object) and laid out as people
keep it (the files above, each edited in place). Both run interleaved on fresh copies.
"""

from __future__ import annotations

import copy
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.bench_commit import CHANGES as WIRED_CHANGES
from bench.bench_commit import _data, _tree, build_base, worker_path_rate
from pipeline.commit.yamlrender import render_object
from pipeline.intent.homes import ObjectKey, build_index
from pipeline.intent.plan import plan_change

NAMESPACES = 50
PER_NAMESPACE = 100
CHANGES = 300
ROUNDS = 3


def configmap(ns: int, i: int, revision: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i:03d}", "namespace": f"ns-{ns:02d}", "labels": {"app": f"app-{i}"}},
        "data": {"revision": str(revision), "config.yaml": f"key: value-{revision}\nother: {i}\n"},
    }


def repository() -> dict[str, bytes]:
    return {
        f"live/ns-{ns:02d}/cm-{i:03d}.yaml": f"# owned by team {i % 7}\n".encode()
        + render_object(configmap(ns, i, 0))
        for ns in range(NAMESPACES)
        for i in range(PER_NAMESPACE)
    }


def change(n: int) -> tuple[int, int]:
    return (n * 7) % NAMESPACES, (n * 13) % PER_NAMESPACE


def canonical_rate() -> float:
    started = time.perf_counter()
    for n in range(CHANGES):
        ns, i = change(n)
        render_object(configmap(ns, i, n + 1))
    return CHANGES / (time.perf_counter() - started)


def in_place_rate(files: dict[str, bytes]) -> float:
    index = build_index(files, "live")
    started = time.perf_counter()
    for n in range(CHANGES):
        ns, i = change(n)
        before = configmap(ns, i, 0)
        after = copy.deepcopy(before)
        after["data"]["revision"] = str(n + 1)
        key = ObjectKey("", "ConfigMap", f"ns-{ns:02d}", f"cm-{i:03d}")
        plan = plan_change(index, files, key, (before, after))
        assert plan is not None
    return CHANGES / (time.perf_counter() - started)


def index_cost(files: dict[str, bytes]) -> tuple[float, float]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    started = time.perf_counter()
    for data in files.values():
        yaml.load(data, Loader=loader)
    parsed = time.perf_counter() - started
    started = time.perf_counter()
    build_index(files, "live")
    return time.perf_counter() - started, parsed


def build_user_base(root: Path, files: dict[str, bytes]) -> Path:
    """The people's layout of `files` as a bare repository, written once with fast-import."""
    base = root / "user-base.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(base)], check=True)
    stream = bytearray(b"commit refs/heads/main\ncommitter Team <team@example.com> 1700000000 +0000\n")
    stream += _data(b"the team's config")
    for path, data in files.items():
        stream += f"M 100644 inline {path}\n".encode() + _data(data)
    subprocess.run(["git", "-C", str(base), "fast-import", "--quiet"], input=bytes(stream), check=True)
    return base


def wired_rates(files: dict[str, bytes]) -> tuple[float, float, bool]:
    """Median commits/s of the worker on the canonical layout and on the people's layout, and
    whether every file of the people's layout kept its comment."""
    with tempfile.TemporaryDirectory(prefix="bench-intent-") as tmp:
        root = Path(tmp)
        canonical_base, user_base = build_base(root), build_user_base(root, files)
        canonical: list[float] = []
        in_place: list[float] = []
        for n in range(ROUNDS):
            run = root / f"round-{n}"
            (run / "canonical").mkdir(parents=True)
            (run / "in-place").mkdir()
            canonical.append(worker_path_rate(canonical_base, run / "canonical"))
            in_place.append(worker_path_rate(user_base, run / "in-place"))
        clones = root / "round-0" / "in-place" / "worker"
        clone = next(p.parent for p in clones.rglob("HEAD") if p.parent.name != "logs")
        listing = subprocess.run(
            ["git", "-C", str(clone), "ls-tree", "-r", "--name-only", "main"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        kept = listing == sorted(files) and _tree(clones) != _tree(root / "user-base.git")
        return statistics.median(canonical), statistics.median(in_place), kept


def main() -> None:
    files = repository()
    canonical = [canonical_rate() for _ in range(ROUNDS)]
    in_place = [in_place_rate(files) for _ in range(ROUNDS)]
    indexed, parsed = index_cost(files)
    c, p = statistics.median(canonical), statistics.median(in_place)
    print(f"canonical writer (baseline)  {c:9.0f} changes/s")
    print(f"in-place writer              {p:9.0f} changes/s  = {p / c:.2f}x the canonical writer")
    print(
        f"index of {len(files)} files      {indexed * 1e6 / len(files):9.0f} us/file = "
        f"{parsed / indexed:.2f}x PyYAML's (libyaml) safe load of the same files"
    )
    wired_canonical, wired_in_place, kept = wired_rates(files)
    print(f"wired, {WIRED_CHANGES} commits of one change each through BranchWorker.handle:")
    print(f"  canonical layout (baseline) {wired_canonical:9.1f} commits/s")
    print(
        f"  people's layout, in place   {wired_in_place:9.1f} commits/s  = "
        f"{wired_in_place / wired_canonical:.2f}x the canonical writer"
    )
    print(f"  no canonical copy written beside the people's files: {'yes' if kept else 'NO'}")
