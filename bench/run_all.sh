#!/usr/bin/env bash
# Run every benchmark in bench/*.py in turn (make bench). Each benchmark prints its own table and writes
# JSON under bench/results/ (git-ignored). Add a line below for a benchmark that needs arguments; files not
# listed explicitly are run without arguments. Exit status: non-zero if any benchmark failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
status=0
run() {
  echo "=== $* ==="
  local t0=$SECONDS
  if ! "$PY" "$@"; then echo "!!! $1 FAILED"; status=1; fi
  echo "=== $1 done in $((SECONDS - t0)) s ==="
}
declare -A explicit=()
# Explicit lines (benchmark with arguments):
run bench/raft_bench.py; explicit[bench/raft_bench.py]=1
run bench/scm_throughput.py; explicit[bench/scm_throughput.py]=1
run bench/failover.py --runs 10 --fault stop; explicit[bench/failover.py]=1
run bench/scale.py; explicit[bench/scale.py]=1
run bench/backup.py --sizes 100000,1000000; explicit[bench/backup.py]=1
explicit[bench/issue9_summary.py]=1  # run last: it reads what the others wrote
explicit[bench/ozone_anchor.py]=1  # a helper of wire.py and failover_ozone.py, not a benchmark
# Every other benchmark, no arguments:
for f in bench/*.py; do
  [ -n "${explicit[$f]:-}" ] && continue
  run "$f"
done
run bench/issue9_summary.py
echo "make bench: $SECONDS s in all"
exit $status
