#!/usr/bin/env bash
# Run every benchmark module of the bench package in turn (make bench). Each benchmark prints its own table and writes
# JSON under bench/results/ (git-ignored). Add a line below for a benchmark that needs arguments; modules not listed
# explicitly are run without arguments. Each runs as `python -m bench.<name>` from the repository root. Exit status:
# non-zero if any benchmark failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
status=0
run() {
  local name=$1
  shift
  echo "=== bench.$name $* ==="
  local t0=$SECONDS
  if ! "$PY" -m "bench.$name" "$@"; then echo "!!! bench.$name FAILED"; status=1; fi
  echo "=== bench.$name done in $((SECONDS - t0)) s ==="
}
declare -A explicit=()
# Explicit lines (benchmark with arguments):
run raft_bench; explicit[raft_bench]=1
run scm_throughput; explicit[scm_throughput]=1
run failover --runs 10 --fault stop; explicit[failover]=1
run scale; explicit[scale]=1
run backup --sizes 100000,1000000; explicit[backup]=1
explicit[issue9_summary]=1  # run last: it reads what the others wrote
explicit[ozone_anchor]=1  # a helper of wire and failover_ozone, not a benchmark
explicit[failover_secure]=1  # the secure rings of failover_ozone (--secure), not run by make bench (it takes long: docs/performance.md)
explicit[interleave]=1  # a helper of wire (interleaved rounds), not a benchmark
explicit[__init__]=1
# Every other benchmark, no arguments:
for f in bench/*.py; do
  name=$(basename "$f" .py)
  [ -n "${explicit[$name]:-}" ] && continue
  run "$name"
done
run issue9_summary
echo "make bench: $SECONDS s in all"
exit $status
