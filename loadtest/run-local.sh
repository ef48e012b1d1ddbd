#!/usr/bin/env bash
# Starts a throwaway 3-node dev cluster, runs strata-load against it, and
# stops it. Extra arguments go to strata-load (see bin/strata-load --help).
# Used by `make load`.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${LOAD_BASE_PORT:-19092}
dir=$(mktemp -d)
bin/strata dev --dir "$dir" --base-port "$port" --storage-nodes 3 > "$dir/dev.out" 2>&1 &
dev=$!
stop() { kill -INT "$dev" 2>/dev/null || true; wait "$dev" 2>/dev/null || true; rm -rf "$dir"; }
trap stop EXIT
if ! bin/strata --gateway "http://127.0.0.1:$port" cluster status --exit-when-healthy --timeout 90s > /dev/null; then
  echo "load: the dev cluster did not become healthy; its output:" >&2
  cat "$dir/dev.out" >&2
  exit 1
fi
bin/strata-load --gateway "http://127.0.0.1:$port" "$@"
