#!/usr/bin/env bash
# Hang detection latency (docs/performance.md, "Heartbeats and sections"): how
# long after a worker's section or heartbeat deadline ddprun has killed its
# tree, as the agent logs it ("killed its process tree (N ms after the
# deadline)"). The example trainer stalls rank 1 inside a "step" section;
# each rep is one ddprun run. Usage:
#   BUILD_DIR=build scripts/bench/hang_detection.sh [REPS] [NPROC]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
REPS=${1:-10}
NPROC=${2:-2}
for f in ddprun ddp-example-train; do
  [[ -x $BUILD_DIR/bin/$f ]] || { echo "missing $BUILD_DIR/bin/$f: build it first" >&2; exit 2; }
done
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # $1: source of the deadline (section|heartbeat)
  local flags=(--section_timeouts step=1)
  [[ $1 == heartbeat ]] && flags=(--heartbeat_timeout 1)
  ("$BUILD_DIR/bin/ddprun" --standalone --nproc_per_node="$NPROC" "${flags[@]}" --no_python \
    "$BUILD_DIR/bin/ddp-example-train" --epochs 1 --dataset-size 4096 --step-sleep-ms 20 \
    --stall-rank 1 --stall-at-step 3 --checkpoint "$tmp/ckpt" 2>&1 || true) |
    sed -n 's/.*killed its process tree (\([0-9]*\) ms after the deadline).*/\1/p'
}
for source in section heartbeat; do
  lat=()
  for ((i = 0; i < REPS; i++)); do lat+=("$(run "$source")"); done
  printf '%s\n' "${lat[@]}" | sort -n | awk -v s="$source" -v n="$NPROC" '
    { v[NR] = $1 } END { printf "%-9s nproc=%s reps=%d  median %d ms  max %d ms  (all: ", s, n, NR, v[int((NR + 1) / 2)], v[NR];
      for (i = 1; i <= NR; i++) printf "%s%s", v[i], (i < NR ? " " : ")\n") }'
done
