#!/usr/bin/env bash
# Starts a throwaway 3-node dev cluster, runs strata-load against it with
# the cluster's CPU accounting, and stops it. Extra arguments go to
# strata-load (bin/strata-load --help). Used by `make load` and
# `make bench-cluster`; LOAD_BASE_PORT moves the cluster's ports, and
# LOAD_SECURE=1 starts it with `strata dev --secure` (TLS, mutual TLS
# between services, authentication and ACLs) and loads it as its admin.
# LOAD_KAFKA=1 runs strata-load a second time on the same cluster with
# --protocol kafka (franz-go at the Kafka listener), RF=3 acks=all only.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in strata strata-load; do
  if [ ! -x "bin/$b" ]; then
    echo "load: bin/$b is missing; run 'make build' (make load does it for you)" >&2
    exit 1
  fi
done
port=${LOAD_BASE_PORT:-19092}
dir=$(mktemp -d)
scheme=http
dev_flags=()
if [ "${LOAD_SECURE:-0}" != 0 ]; then
  scheme=https
  dev_flags+=(--secure)
fi
echo "load: starting a throwaway 3-node cluster in $dir (gateway $scheme://127.0.0.1:$port)" >&2
started=$SECONDS
bin/strata dev --dir "$dir" --base-port "$port" --storage-nodes 3 "${dev_flags[@]}" > "$dir/dev.out" 2>&1 &
dev=$!
stop() {
  echo "load: stopping the cluster" >&2
  kill -INT "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT
if [ "$scheme" = https ]; then
  # strata dev --secure writes the admin's credentials once its CA is
  # made; the CLI and strata-load read them from the environment.
  for _ in $(seq 600); do
    [ -s "$dir/admin.env" ] && break
    sleep 0.1
  done
  # shellcheck disable=SC1091 # written by strata dev --secure
  . "$dir/admin.env"
fi
if ! bin/strata --gateway "$scheme://127.0.0.1:$port" cluster status --exit-when-healthy --timeout 90s > /dev/null; then
  echo "load: the dev cluster did not become healthy; its output:" >&2
  cat "$dir/dev.out" >&2
  exit 1
fi
# cluster.json lists every process once the start is complete; the CPU
# accounting reads it.
for _ in $(seq 600); do
  grep -q '"ready": true' "$dir/cluster.json" 2>/dev/null && break
  sleep 0.1
done
echo "load: cluster healthy after $((SECONDS - started))s" >&2
bin/strata-load --gateway "$scheme://127.0.0.1:$port" --cluster-json "$dir/cluster.json" "$@"
if [ "${LOAD_KAFKA:-0}" != 0 ]; then
  echo "load: the same workload with franz-go at the Kafka listener" >&2
  bin/strata-load --gateway "$scheme://127.0.0.1:$port" --cluster-json "$dir/cluster.json" "$@" --protocol kafka --durability rf3-all
fi
