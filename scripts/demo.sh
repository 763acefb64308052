#!/usr/bin/env bash
# The main job on an embedded default: installs dependencies, builds, then trains
# a small MLP with 4 worker processes under `ddprun --standalone` (Gloo on CPU).
# Extra arguments go to the training program (e.g. --epochs 10).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
workdir=$(mktemp -d -t ddp-demo-XXXXXX)
trap 'rm -rf "$workdir"' EXIT
echo "demo: ddprun --standalone --nproc_per_node=4 build/bin/ddp-example-train (logs in $workdir)"
build/bin/ddprun --standalone --nproc_per_node=4 --log_dir "$workdir/logs" \
  build/bin/ddp-example-train --checkpoint "$workdir/model.ckpt" "$@"
