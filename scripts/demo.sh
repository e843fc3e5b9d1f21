#!/usr/bin/env bash
# Sets everything up, starts the local simulated cluster of examples/clusters/local.yaml (16 agents: two v6e-16
# slices, a v5litepod-8, a v4-16, CPU and GPU hosts) and runs a real PyTorch DDP training job on a whole simulated
# TPU-V6E 4x4 slice: one worker per host, gang-scheduled, with checkpoints.
# The cluster keeps running afterwards: `build/bin/torus status`, `build/bin/torus dashboard` (the page's URL),
# `build/bin/torus train list`, `build/bin/torus down`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The programs and the Python module only: the tests build with scripts/test.sh.
TORUS_TARGETS="torus torus-head torus-node torus-tpu-sim _torus_core" WITH_TORCH=1 WITH_DEV_VENV=0 scripts/setup.sh
torus=build/bin/torus
"$torus" down >/dev/null 2>&1 || true
"$torus" up examples/clusters/local.yaml "$@"
echo
echo "== Training examples/train_torch.py on a TPU-V6E 4x4 slice (4 hosts, one worker each) =="
# A run resumes from the checkpoints of an earlier run of the same name; the demo starts from scratch each time.
rm -rf /tmp/torus/runs/demo
"$torus" train --accelerator-type TPU-V6E --topology 4x4 --name demo --max-failures 2 \
  -- /usr/bin/python3 "$PWD/examples/train_torch.py" --steps 60 --checkpoint-every 10
echo
"$torus" train status demo
echo
echo "The cluster is still running. Dashboard (slices, the run's loss curve and per-rank logs, chip metrics):"
echo "  $("$torus" dashboard)"
echo "Stop it with: $torus down"
