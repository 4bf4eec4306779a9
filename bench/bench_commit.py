"""Commit rate of the commit worker against `git fast-import` on the same change stream.

A 5,000-file repository (50 namespaces x 100 ConfigMaps in the canonical layout), then a stream of
commits that each change one file. Baseline: `git fast-import` fed the whole stream at once.
Measured: the worker's index-free commit path (tree edit, object writes, commit, ref update), and
the full per-event path through `BranchWorker.handle` (JSON decode, YAML render, window with
W=0, commit). GitPython's index-based commit is printed as a further reference point.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import git

from pipeline.codec.branch_work import WorkAuthor, WorkItem, Write
from pipeline.codec.stream_id import StreamId
from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.identity import Identity
from pipeline.commit.messages import ChangedObject
from pipeline.commit.plan import Byline, Plan, PlanKind
from pipeline.commit.position import LogPosition
from pipeline.commit.yamlrender import render_object
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.operation import Operation

NAMESPACES = 50
PER_NAMESPACE = 100
CHANGES = 600
ROUNDS = 3
INDEX_COMMITS = 15
WHO = Identity("Alice Example", "alice@example.com")
BYLINE = Byline(WHO, "user", "alice@example.com", 1_700_000_000, ("exact alice@example.com",))


def configmap(ns: int, i: int, revision: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i:03d}", "namespace": f"ns-{ns:02d}", "labels": {"app": f"app-{i}"}},
        "data": {"revision": str(revision), "config.yaml": f"key: value-{revision}\nother: {i}\n"},
    }


def path_of(ns: int, i: int) -> str:
    return f"live/ns-{ns:02d}/configmaps/cm-{i:03d}.yaml"


def change(n: int) -> tuple[int, int]:
    return (n * 7) % NAMESPACES, (n * 13) % PER_NAMESPACE


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def build_base(root: Path) -> Path:
    """The 5,000-file starting repository, written once with fast-import."""
    base = root / "base.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(base)], check=True)
    stream = bytearray(b"commit refs/heads/main\ncommitter Bench <bench@example.com> 1700000000 +0000\n")
    stream += _data(b"base")
    for ns in range(NAMESPACES):
        for i in range(PER_NAMESPACE):
            stream += f"M 100644 inline {path_of(ns, i)}\n".encode() + _data(
                render_object(configmap(ns, i, 0))
            )
    subprocess.run(["git", "-C", str(base), "fast-import", "--quiet"], input=bytes(stream), check=True)
    return base


def fast_import_rate(base: Path, root: Path) -> float:
    repo = root / "fast-import.git"
    shutil.copytree(base, repo)
    stream = bytearray()
    for n in range(CHANGES):
        ns, i = change(n)
        stream += b"commit refs/heads/main\n"
        stream += b"author Alice Example <alice@example.com> 1700000000 +0000\n"
        stream += b"committer Reverser Pipeline <noreply@reverser.invalid> 1700000000 +0000\n"
        stream += _data(f"[UPDATE] v1/configmaps/cm-{i:03d}\n\nReverser-Offset: 0:{n}\n".encode())
        if n == 0:
            stream += b"from refs/heads/main^0\n"
        stream += f"M 100644 inline {path_of(ns, i)}\n".encode()
        stream += _data(render_object(configmap(ns, i, n + 1)))
    started = time.perf_counter()
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=bytes(stream), check=True)
    return CHANGES / (time.perf_counter() - started)


def commit_path_rate(base: Path, root: Path) -> float:
    remote = root / "ours-remote.git"
    shutil.copytree(base, remote)
    worker, repo = _worker(remote, root / "ours")
    asyncio.run(worker.sync())
    contents = [render_object(configmap(*change(n), n + 1)) for n in range(CHANGES)]

    async def commit_all() -> None:
        for n, content in enumerate(contents):
            ns, i = change(n)
            plan = Plan(
                kind=PlanKind.WINDOW,
                target="t1",
                at=LogPosition("git", "main", 0, n),
                byline=BYLINE,
                writes={
                    path_of(ns, i): (
                        content,
                        ChangedObject(
                            Operation.UPDATE, "", "v1", "configmaps", f"ns-{ns:02d}", f"cm-{i:03d}"
                        ),
                    )
                },
            )
            assert await worker._make_commit(plan) is not None

    started = time.perf_counter()
    asyncio.run(commit_all())
    assert worker.tip is not None
    repo.set_branch("main", worker.tip)
    elapsed = time.perf_counter() - started
    repo.close()
    return CHANGES / elapsed


def _worker(remote: Path, clones: Path) -> tuple[BranchWorker, LocalRepo]:
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=10_000)
    settings = Settings(
        workdir=clones, providers=[provider], targets=[TargetSettings(name="t1", provider="git", path="live")]
    )
    repo = LocalRepo.for_branch(clones, "git", "main", str(remote), None)
    return BranchWorker(settings, provider, "main", repo, lambda _offsets: None), repo


def worker_path_rate(base: Path, root: Path) -> float:
    remote = root / "worker-remote.git"
    shutil.copytree(base, remote)
    worker, repo = _worker(remote, root / "worker")
    author = WorkAuthor(
        "RESOLVED", "alice@example.com", "Alice Example", "alice@example.com", "exact", "user"
    )
    items = []
    for n in range(CHANGES):
        ns, i = change(n)
        items.append(
            WorkItem(
                0,
                n,
                "git",
                "main",
                "live",
                StreamId("t1", "default", "", "v1", "configmaps", f"ns-{ns:02d}"),
                1_700_000_000_000 + n,
                Write(
                    "UPDATE",
                    f"ns-{ns:02d}",
                    f"cm-{i:03d}",
                    "u",
                    str(n),
                    json.dumps(configmap(ns, i, n + 1)).encode(),
                    author,
                ),
            )
        )

    async def run() -> float:
        await worker.sync()
        started = time.perf_counter()
        for item in items:
            await worker.handle(item)
        assert worker.pending_commits == CHANGES
        assert worker.tip is not None
        repo.set_branch("main", worker.tip)
        return time.perf_counter() - started

    elapsed = asyncio.run(run())
    repo.close()
    return CHANGES / elapsed


def index_rate(base: Path, root: Path) -> float:
    work = root / "index-clone"
    subprocess.run(["git", "clone", "-q", str(base), str(work)], check=True)
    repo = git.Repo(work)
    actor = git.Actor(WHO.name, WHO.email)
    started = time.perf_counter()
    for n in range(INDEX_COMMITS):
        ns, i = change(n)
        (work / path_of(ns, i)).write_bytes(render_object(configmap(ns, i, n + 1)))
        repo.index.add([path_of(ns, i)])
        repo.index.commit(f"[UPDATE] v1/configmaps/cm-{i:03d}", author=actor, committer=actor)
    elapsed = time.perf_counter() - started
    repo.close()
    return INDEX_COMMITS / elapsed


def _tree(repo: Path) -> str:
    """The tree of `main` in a bare repository, or in the single worker clone under `repo`."""
    if not (repo / "HEAD").exists():
        repo = next(p.parent for p in repo.rglob("HEAD") if p.parent.name != "logs")
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "main^{tree}"], check=True, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    """Contenders run interleaved for several rounds on fresh copies; each reports its median rate.

    The machine is shared, so interleaving spreads background load evenly over all contenders.
    """
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp:
        root = Path(tmp)
        base = build_base(root)
        print(
            f"repository: {NAMESPACES * PER_NAMESPACE} files; stream: {CHANGES} commits, one file each; "
            f"{ROUNDS} interleaved rounds, median"
        )
        rates: dict[str, list[float]] = {"fast": [], "ours": [], "worker": []}
        same = True
        for n in range(ROUNDS):
            run = root / f"round-{n}"
            run.mkdir()
            rates["fast"].append(fast_import_rate(base, run))
            rates["ours"].append(commit_path_rate(base, run))
            rates["worker"].append(worker_path_rate(base, run))
            same = same and _tree(run / "fast-import.git") == _tree(run / "ours") == _tree(run / "worker")
        index = index_rate(base, root)
        baseline, ours, worker = (statistics.median(rates[k]) for k in ("fast", "ours", "worker"))
        rows = [
            ("baseline git fast-import", baseline),
            ("commit path (trees, commits, pack, ref)", ours),
            ("worker path (decode, render, window, commit)", worker),
            ("GitPython index commit (reference)", index),
        ]
        for label, rate in rows:
            print(f"{label:<46}: {rate:9.1f} commits/s  ({rate / baseline:.3f}x fast-import)")
        print(f"final trees identical to fast-import's: {'yes' if same else 'NO'}")
        verdict = "met" if min(ours, worker) / baseline >= 0.2 else "NOT met"
        print(f"target >= 0.20x fast-import: {verdict}")


if __name__ == "__main__":
    main()
