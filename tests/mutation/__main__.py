"""`make mutation`: mutation testing of the modules where a silent bug costs most.

Runs each mutant of each module in `modules.toml` against that module's tests in a private copy
of the repository (so a mutant never touches the working tree or a concurrent test run), and
prints `mutation: MODULE killed K of N (S%)` per module. Exits 1 when a module is below its
threshold. Mutants judged equivalent (no test could tell them apart) are listed with a reason in
`equivalent.toml` and left out of the score.

    python -m tests.mutation [--module SUBSTRING] [--sample N] [--jobs N] [--list]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tests.mutation.mutants import Mutant, apply_mutant, find_mutants

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
COPIED = ("pipeline", "tests", "schemas", "pyproject.toml")
DEFAULT_SAMPLE = 150
SAMPLE_SEED = 20261201
MIN_TIMEOUT_S = 30.0
TIMEOUT_FACTOR = 4.0
OUTPUT_TAIL_CHARS = 4000


class Outcome(StrEnum):
    KILLED = "killed"
    SURVIVED = "survived"
    TIMEOUT = "timeout"
    EQUIVALENT = "equivalent"


@dataclass(frozen=True, slots=True)
class ModuleSpec:
    path: str
    tests: tuple[str, ...]
    threshold: float
    functions: frozenset[str] | None
    sample: int
    deselect: tuple[str, ...] = ()

    def mutants(self) -> list[Mutant]:
        """Every mutant of the module as it is now (before sampling)."""
        return find_mutants((REPO_ROOT / self.path).read_text(encoding="utf-8"), self.functions)


@dataclass(slots=True)
class ModuleResult:
    spec: ModuleSpec
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes.values() if o is outcome)

    @property
    def scored(self) -> int:
        return len(self.outcomes) - self.count(Outcome.EQUIVALENT)

    @property
    def killed(self) -> int:
        return self.count(Outcome.KILLED) + self.count(Outcome.TIMEOUT)

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.scored if self.scored else 100.0


def load_specs(default_sample: int) -> list[ModuleSpec]:
    config = tomllib.loads((HERE / "modules.toml").read_text(encoding="utf-8"))
    specs = []
    for entry in config["module"]:
        functions = entry.get("functions")
        specs.append(
            ModuleSpec(
                path=entry["path"],
                tests=tuple(entry["tests"]),
                threshold=float(entry["threshold"]),
                functions=frozenset(functions) if functions else None,
                sample=int(entry.get("sample", default_sample)),
                deselect=tuple(entry.get("deselect", ())),
            )
        )
    return specs


def load_equivalent() -> dict[str, dict[str, str]]:
    """module path -> mutant id -> why it is equivalent."""
    config = tomllib.loads((HERE / "equivalent.toml").read_text(encoding="utf-8"))
    found: dict[str, dict[str, str]] = {}
    for entry in config.get("equivalent", []):
        found.setdefault(entry["module"], {})[entry["mutant"]] = entry["reason"]
    return found


def stale_entries(specs: list[ModuleSpec], equivalent: dict[str, dict[str, str]]) -> list[str]:
    """Equivalence entries that match no mutant of their module (or name no module in `specs`).

    An entry goes stale when the code it names changes; it must be judged again, so a stale
    entry is an error rather than silently ignored.
    """
    known = {spec.path: {m.id for m in spec.mutants()} for spec in specs}
    stale = []
    for module, entries in equivalent.items():
        for mutant in entries:
            if module not in known:
                stale.append(f"{module} {mutant} (the module is not in modules.toml)")
            elif mutant not in known[module]:
                stale.append(f"{module} {mutant} (matches no mutant of the module)")
    return stale


def sample_mutants(mutants: list[Mutant], size: int) -> list[Mutant]:
    """A stable sample: the same source and size always give the same mutants."""
    if len(mutants) <= size:
        return mutants
    chosen = random.Random(SAMPLE_SEED).sample(range(len(mutants)), size)
    return [mutants[i] for i in sorted(chosen)]


@contextmanager
def repository_copy() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="reverser-mutation-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        for name in COPIED:
            source = REPO_ROOT / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, root / name)
        yield root


def run_tests(root: Path, spec: ModuleSpec, timeout_s: float | None) -> tuple[bool, bool, str]:
    """(passed, timed_out, the end of pytest's output) of the module's tests in the copy at `root`."""
    deselected = [f"--deselect={node}" for node in spec.deselect]
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not e2e"]
    command = [*pytest, *deselected, *spec.tests]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        result = subprocess.run(
            command, cwd=root, env=env, capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return False, True, ""
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    return result.returncode == 0, False, output[-OUTPUT_TAIL_CHARS:]


def run_module(spec: ModuleSpec, equivalent: dict[str, str], jobs: int) -> ModuleResult:
    source = (REPO_ROOT / spec.path).read_text(encoding="utf-8")
    mutants = sample_mutants(find_mutants(source, spec.functions), spec.sample)
    result = ModuleResult(spec)
    with repository_copy() as baseline_root:
        started = time.monotonic()
        passed, _, output = run_tests(baseline_root, spec, None)
        if not passed:
            print(output, file=sys.stderr)
            raise SystemExit(f"mutation: the tests of {spec.path} fail without any mutant; fix them first")
        timeout_s = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * (time.monotonic() - started))

    def one(mutant: Mutant) -> tuple[Mutant, Outcome]:
        if mutant.id in equivalent:
            return mutant, Outcome.EQUIVALENT
        with repository_copy() as root:
            (root / spec.path).write_text(apply_mutant(source, mutant, spec.functions), encoding="utf-8")
            passed, timed_out, _ = run_tests(root, spec, timeout_s)
        if timed_out:
            return mutant, Outcome.TIMEOUT
        return mutant, Outcome.SURVIVED if passed else Outcome.KILLED

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done, (mutant, outcome) in enumerate(pool.map(one, mutants), start=1):
            result.outcomes[mutant.id] = outcome
            result.descriptions[mutant.id] = mutant.description
            if outcome in (Outcome.SURVIVED, Outcome.TIMEOUT):
                where = f"[line {mutant.line}: {mutant.description}]"
                print(f"  {outcome}: {spec.path} {mutant.id}  {where}", flush=True)
            if done % 25 == 0:
                print(f"  {spec.path}: {done}/{len(mutants)} mutants run", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.split("\n")[0])
    parser.add_argument("--module", help="only modules whose path contains this")
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, help="mutants per module (default 150)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="parallel runs")
    parser.add_argument("--list", action="store_true", help="list the sampled mutants and exit")
    args = parser.parse_args(argv)
    specs = [s for s in load_specs(args.sample) if args.module is None or args.module in s.path]
    if not specs:
        parser.error(f"no module in modules.toml matches {args.module!r}")
    equivalent = load_equivalent()
    if args.module is not None:
        equivalent = {path: entries for path, entries in equivalent.items() if args.module in path}
    if args.list:
        for spec in specs:
            for mutant in sample_mutants(spec.mutants(), spec.sample):
                print(f"{spec.path} {mutant.id}  [line {mutant.line}: {mutant.description}]")
        return 0
    stale = stale_entries(specs, equivalent)
    for entry in stale:
        print(f"mutation: stale equivalence entry {entry}", file=sys.stderr)
    if stale:
        print("mutation: judge the stale entries again and re-pin them in equivalent.toml", file=sys.stderr)
        return 1
    failed = False
    for spec in specs:
        result = run_module(spec, equivalent.get(spec.path, {}), args.jobs)
        print(
            f"mutation: {spec.path} killed {result.killed} of {result.scored} ({result.score:.1f}%)"
            f" [{result.count(Outcome.TIMEOUT)} by timeout, {result.count(Outcome.EQUIVALENT)} equivalent,"
            f" threshold {spec.threshold:.0f}%]",
            flush=True,
        )
        failed |= result.score < spec.threshold
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
