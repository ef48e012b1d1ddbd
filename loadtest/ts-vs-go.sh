#!/usr/bin/env bash
# Compares the TypeScript client with the Go client on one throwaway 3-node
# dev cluster: ROUNDS alternations (default 4) of strata-load and the TS
# load program (ts/client/bench/load.ts), each producing RECORDS records
# (default 100000) of 1 KiB to a fresh 12-partition RF 3 topic with
# acks=all and 2048 records in flight, then reading it back with one
# consumer. Prints every run, then the medians and TS / Go. Used by
# `make ts-load`; LOAD_BASE_PORT moves the cluster's ports. TS_BEFORE, the
# path of another build's load.js (say, the main branch's client built
# beside this one), adds a run of it to each round, so a change to the TS
# client is measured before and after in one sitting. Figures, not a
# test: on a shared machine compare runs of one sitting only.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-4}
records=${RECORDS:-100000}
for f in bin/strata bin/strata-load ts/client/dist/bench/load.js; do
  if [ ! -e "$f" ]; then
    echo "ts-vs-go: $f is missing; run 'make build ts' (make ts-load does it for you)" >&2
    exit 1
  fi
done
port=${LOAD_BASE_PORT:-19092}
gw="http://127.0.0.1:$port"
dir=$(mktemp -d)
echo "ts-vs-go: starting a throwaway 3-node cluster in $dir (gateway $gw)" >&2
bin/strata dev --dir "$dir" --base-port "$port" --storage-nodes 3 > "$dir/dev.out" 2>&1 &
dev=$!
stop() {
  kill -INT "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT
healthy=0
for _ in $(seq 90); do
  kill -0 "$dev" 2>/dev/null || break # strata dev gave up (a port in use, ...)
  if bin/strata --gateway "$gw" cluster status --exit-when-healthy --timeout 1s > /dev/null 2>&1; then
    healthy=1
    break
  fi
done
if [ "$healthy" = 0 ]; then
  echo "ts-vs-go: the dev cluster did not become healthy; its output:" >&2
  cat "$dir/dev.out" >&2
  exit 1
fi
for _ in $(seq 600); do
  grep -q '"ready": true' "$dir/cluster.json" 2>/dev/null && break
  sleep 0.1
done

out=$dir/runs.txt
for i in $(seq "$rounds"); do
  o=$(bin/strata-load --gateway "$gw" --cluster-json "$dir/cluster.json" --durability rf3-all --modes max,consume \
    --records "$records" --inflight 2048 --partitions 12 2>&1) || { echo "$o" >&2; exit 1; }
  # Table columns: workload mode MB/s records/s p50 p99 p999 max cluster-CPU client-CPU
  # ("consume 1" is two words).
  echo "$o" | awk -v r="$i" '/p12-1KiB-rf3-all  max /{p=$3; pc=$10} /p12-1KiB-rf3-all  consume 1 /{c=$4; cc=$11}
    END {printf "go %d produce %s MB/s (client CPU %s s/GB) consume %s MB/s (client CPU %s s/GB)\n", r, p, pc, c, cc}' | tee -a "$out"
  for run in ${TS_BEFORE:+before} ts; do
    prog=ts/client/dist/bench/load.js
    if [ "$run" = before ]; then prog=$TS_BEFORE; fi
    o=$(node "$prog" --gateway "$gw" --records "$records" 2>&1) || { echo "$o" >&2; exit 1; }
    echo "$o" | awk -v r="$i" -v k="$run" '/^produce:/{p=$2; pc=$(NF-1)} /^consume:/{c=$2; cc=$(NF-1)}
      END {printf "%s %d produce %s MB/s (client CPU %s s/GB) consume %s MB/s (client CPU %s s/GB)\n", k, r, p, pc, c, cc}' | tee -a "$out"
  done
done
awk '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
  }
  { k = $1; n[k]++; p[k, n[k]] = $4; c[k, n[k]] = $11 }
  END {
    for (k in n) { for (i = 1; i <= n[k]; i++) { pp[i] = p[k, i]; cp[i] = c[k, i] } mp[k] = median(pp, n[k]); mc[k] = median(cp, n[k]) }
    printf "medians: produce Go %.1f, TS %.1f MB/s (TS/Go %.2f x); consume Go %.1f, TS %.1f MB/s (TS/Go %.2f x)\n",
      mp["go"], mp["ts"], mp["ts"] / mp["go"], mc["go"], mc["ts"], mc["ts"] / mc["go"]
    if ("before" in n)
      printf "medians: TS before %.1f MB/s produce, %.1f MB/s consume (TS/TS before: produce %.2f x, consume %.2f x)\n",
        mp["before"], mc["before"], mp["ts"] / mp["before"], mc["ts"] / mc["before"]
  }' "$out"
