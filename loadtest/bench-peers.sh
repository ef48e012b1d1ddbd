#!/usr/bin/env bash
# Runs the peer-systems benchmark (NATS JetStream with 3 servers at R3, and
# Redis Streams) on the workload strata-load's headline uses: 1 KiB
# values, 12 partitions/streams, keys spread, the same in-flight bound.
# It is not part of this repository: it is looked for in PEERS_DIR
# (default: shared/bench/peers in the directory that holds the
# repository). Prints one line per system.
# Usage: bench-peers.sh [records] [inflight]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PEERS_DIR:-$root/../shared/bench/peers}
if [ ! -x "$dir/run.sh" ] && [ ! -f "$dir/run.sh" ]; then
  echo "bench-peers: no peer benchmark at $dir (run.sh not found); set PEERS_DIR to where it is checked out" >&2
  exit 1
fi
echo "bench-peers: running $dir/run.sh ${1:-200000} ${2:-512} (NATS JetStream R3, Redis Streams)" >&2
bash "$dir/run.sh" "${1:-200000}" "${2:-512}"
