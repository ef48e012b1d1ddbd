#!/usr/bin/env bash
# The benchmark behind docs/performance.md: the peer systems first (when
# their benchmark is found, see bench-peers.sh), then every Strata
# scenario of BENCH_MATRIX on a throwaway 3-node cluster, one after the
# other so they never share the CPU. Prints the table with the targets and
# the ratios to the peers, and keeps the table, the JSON report, the
# peers' output and CPU profiles in BENCH_OUT. Used by `make bench-cluster`.
#
#   BENCH_MATRIX    bench (default: minutes) or full (every combination)
#   BENCH_DURATION  time per produce run (default 15s)
#   BENCH_INFLIGHT  in-flight bound for Strata and the peers (default 512)
#   BENCH_PEERS     0 skips the peers
#   BENCH_OUT       output directory (default bench-out)
#   BENCH_FLAGS     more strata-load flags
#   BENCH_SECURE    0 skips the second run of the matrix on a secure
#                   cluster (strata dev --secure: TLS everywhere, mutual
#                   TLS between services, authentication and ACLs on),
#                   whose table shows what security costs
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench-out}
inflight=${BENCH_INFLIGHT:-512}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
args=(--matrix "${BENCH_MATRIX:-bench}" --records 0 --duration "${BENCH_DURATION:-15s}" --inflight "$inflight"
  --json-file "$out/bench-$stamp.json" --profile "$out/profiles-$stamp")
started=$SECONDS
if [ "${BENCH_PEERS:-1}" != 0 ]; then
  # The peers use the same record count whatever the matrix: theirs is
  # the fixed 1 KiB, 12-partition workload.
  if loadtest/bench-peers.sh "${BENCH_PEERS_RECORDS:-200000}" "$inflight" | tee "$out/peers-$stamp.txt"; then
    args+=(--peers "$out/peers-$stamp.txt")
  else
    echo "bench-cluster: continuing without the peers" >&2
  fi
fi
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
loadtest/run-local.sh "${args[@]}" ${BENCH_FLAGS:-} | tee "$out/bench-$stamp.txt"
if [ "${BENCH_SECURE:-1}" != 0 ]; then
  echo "bench-cluster: the same matrix on a secure cluster (TLS, mutual TLS, authentication, ACLs)" >&2
  secure=(--matrix "${BENCH_MATRIX:-bench}" --records 0 --duration "${BENCH_DURATION:-15s}" --inflight "$inflight"
    --json-file "$out/bench-secure-$stamp.json")
  # shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
  LOAD_SECURE=1 loadtest/run-local.sh "${secure[@]}" ${BENCH_FLAGS:-} | tee "$out/bench-secure-$stamp.txt"
fi
echo "bench-cluster: done in $((SECONDS - started))s; table, JSON and profiles in $out/ (*-$stamp*)" >&2
