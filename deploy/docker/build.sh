#!/bin/sh
# Builds every Strata binary as the container images ship it: static
# (CGO_ENABLED=0), without local paths (-trimpath), stripped, and stamped
# with a version. The Dockerfile runs it, and deploy/check runs it to check
# the binaries it produces, so both build the same way.
#
# Usage (from the repository root):
#   deploy/docker/build.sh OUT_DIR [VERSION [PACKAGE...]]
# PACKAGE defaults to every binary: the CLI and each service.
set -eu
out=${1:?usage: deploy/docker/build.sh OUT_DIR [VERSION [PACKAGE...]]}
version=${2:-devel}
shift
[ $# -gt 0 ] && shift
if [ $# -eq 0 ]; then
  set -- ./cmd/strata \
    ./services/controller/cmd/strata-controller \
    ./services/storage/cmd/strata-storage \
    ./services/gateway/cmd/strata-gateway \
    ./services/coordinator/cmd/strata-coordinator \
    ./services/tiering/cmd/strata-tiering
fi
mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -buildvcs=false \
  -ldflags "-s -w -X github.com/strata-mq/strata/lib/serve.version=$version" \
  -o "$out/" "$@"
