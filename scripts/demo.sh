#!/usr/bin/env bash
# Sets everything up, starts the local simulated cluster of examples/clusters/local.yaml and shows it.
# The cluster keeps running afterwards: `build/bin/torus status`, `build/bin/torus nodes`, `build/bin/torus down`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
torus=build/bin/torus
"$torus" down >/dev/null 2>&1 || true
"$torus" up examples/clusters/local.yaml "$@"
echo
"$torus" nodes
