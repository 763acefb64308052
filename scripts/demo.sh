#!/usr/bin/env bash
# The main job on an embedded default: installs the build dependencies (not
# torch 2.x: the demo needs none), builds, then trains a small MLP with 4
# worker processes under `ddprun --standalone` (Gloo on CPU).
# Extra arguments go to the training program (e.g. --epochs 10).
# Each rank's output is shown and kept (--tee 3) under the logs directory it
# prints, beside the checkpoint (a new directory under $TMPDIR each run).
# DDP_DEMO_SKIP_SETUP=1 reuses build/ as it is, without the install and build steps.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${DDP_DEMO_SKIP_SETUP:-0}" != 1 ]]; then
  scripts/setup.sh
  scripts/build.sh
fi
workdir=$(mktemp -d -t ddp-demo-XXXXXX)
echo "demo: ddprun --standalone --nproc_per_node=4 build/bin/ddp-example-train (logs in $workdir/logs)"
rc=0
build/bin/ddprun --standalone --nproc_per_node=4 --log_dir "$workdir/logs" --tee 3 \
  build/bin/ddp-example-train --checkpoint "$workdir/model.ckpt" "$@" || rc=$?
echo "demo: kept $workdir/logs and $workdir/model.ckpt (exit $rc); rm -rf $workdir removes them"
exit "$rc"
