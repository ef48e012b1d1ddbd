#!/usr/bin/env bash
# test-stress.sh runs `make test` RUNS times in a row while BUSY plain busy
# loops keep that many cores occupied, and prints each run's outcome and
# duration. It is how the suite is shown to pass on a loaded machine: a
# test that fails only when the machine is busy is a defect.
#
# Usage (from the Makefile): make test-stress [STRESS_RUNS=5] [BUSY=1]
#   RUNS  number of `make test` runs (default 5)
#   BUSY  number of busy loops (default 1; 0 runs on an otherwise idle
#         machine, the number of cores keeps every core busy)
#   MAKE  the make to run (the Makefile passes its own)
# Each run's output goes to .tmp/stress/run-N.log. The busy loops are
# killed when the script exits, however it exits. Exit status: 0 when
# every run passed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-5}
busy=${BUSY:-0}
make=${MAKE:-make}
logdir=.tmp/stress
mkdir -p "$logdir"

pids=()
stop_busy() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
}
trap stop_busy EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < busy; i++)); do
	sh -c 'while :; do :; done' &
	pids+=("$!")
done

echo "test-stress: $runs runs of make test, $busy busy loop(s), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
passed=0
for ((run = 1; run <= runs; run++)); do
	log="$logdir/run-$run.log"
	start=$(date +%s)
	if "$make" --no-print-directory test >"$log" 2>&1; then
		result=PASS
		passed=$((passed + 1))
	else
		result=FAIL
	fi
	took=$(($(date +%s) - start))
	echo "test-stress: run $run/$runs: $result in ${took}s (load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown); log $log)"
	if [ "$result" = FAIL ]; then
		grep -E '^(--- FAIL|FAIL|panic:)' "$log" | head -20 | sed 's/^/test-stress:   /' || true
	fi
done
echo "test-stress: $passed of $runs runs passed with $busy busy loop(s)"
[ "$passed" -eq "$runs" ]
