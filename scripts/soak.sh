#!/usr/bin/env bash
# `make soak`: the full test suite SOAK_RUNS times in a row (default 10) in a fixed order
# (`-p no:randomly`), stopping at the first failing run. A flaky test shows up here, where one green
# `make test` proves little. Prints one line per run and a summary with the total time; each run's
# pytest output goes to SOAK_DIR/run-<i>.log (default .reverser/soak), the failing one is tailed.
# Runs on TEST_WORKERS pytest-xdist workers like `make test` (default 2; 0: one process).
# SOAK_PYTEST_ARGS adds pytest options to every run (say `-x` or a path to soak one area).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${SOAK_RUNS:-10}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "soak: SOAK_RUNS must be a positive whole number, not '${runs}'" >&2
  exit 2
fi
workers="${TEST_WORKERS:-2}"
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "soak: TEST_WORKERS must be a whole number, not '${workers}'" >&2
  exit 2
fi
dir="${SOAK_DIR:-.reverser/soak}"
mkdir -p "$dir"
read -r -a extra <<<"${SOAK_PYTEST_ARGS:-}"

started=$SECONDS
for ((i = 1; i <= runs; i++)); do
  log="$dir/run-$i.log"
  run_started=$SECONDS
  if .venv/bin/pytest -p no:randomly -p no:cacheprovider -rs -n "$workers" --dist loadfile "${extra[@]}" >"$log" 2>&1; then
    echo "soak: run $i/$runs passed in $((SECONDS - run_started)) s ($(tail -n 1 "$log" | tr -d '='))"
  else
    echo "soak: run $i/$runs FAILED in $((SECONDS - run_started)) s; the end of $log:"
    tail -n 60 "$log"
    echo "soak: failed at run $i of $runs after $((SECONDS - started)) s in all"
    exit 1
  fi
done
total=$((SECONDS - started))
echo "soak: $runs of $runs runs passed in $total s ($((total / runs)) s per run)"
