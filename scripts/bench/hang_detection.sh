#!/usr/bin/env bash
# Hang detection latency (docs/performance.md, "Heartbeats and sections"): how
# long after a deadline ddprun has killed the hung worker, with its stack, and
# beside it the peers on one torch workload in the same run.
#
# 1. ddprun's own measure, from its log ("killed its process tree (N ms after
#    the deadline)": the deadline in the worker's CLOCK_MONOTONIC to SIGKILL
#    sent), each rep one ddprun run of NPROC ranks:
#      section    the example trainer (native), rank 1 stalls at the end of
#                 step 3, --section_timeouts step=1 (its own deadline passes first)
#      heartbeat  the same with --heartbeat_timeout 1
#      culprit    rank 1 stalls in the compute of step 3, 300 ms late into it:
#                 the other ranks wait for it in the all-reduce and their
#                 deadlines pass first (docs/agent-diagnosis.md, "Who hung")
#      torch      hang_culprit.py (torch gloo, the docs' step) on NPROC ranks,
#                 one hanging in compute, --section_timeouts step=2
# 2. peers.sh hang (unless --no-peers): ddprun's heartbeat and FileTimer,
#    torchrun's FileTimer, ft_launcher's FileTimer and its rank monitor at its
#    default check interval and its best (0.1 s), on peers_train.py, timed
#    from outside (its last report -> its pid gone, less the 2 s timeout).
#    The peers come from scripts/requirements-peers.txt, which peers.sh
#    installs into $PEERS_VENV (default .venv) when missing.
# Usage:
#   BUILD_DIR=build [PEERS_VENV=.venv] scripts/bench/hang_detection.sh [REPS] [NPROC] [--no-peers]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
peers=1
args=()
for a in "$@"; do
  if [[ $a == --no-peers ]]; then peers=0; else args+=("$a"); fi
done
REPS=${args[0]:-10}
NPROC=${args[1]:-2}
PY=${PEERS_VENV:-.venv}/bin/python
for f in ddprun ddp-example-train; do
  [[ -x $BUILD_DIR/bin/$f ]] || { echo "missing $BUILD_DIR/bin/$f: build it first" >&2; exit 2; }
done
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
late() { sed -n 's/.*killed its process tree (\([0-9]*\) ms after the deadline).*/\1/p'; }
native() {  # $1: section|heartbeat|culprit
  local flags=(--section_timeouts step=1) stall=(--stall-in end)
  [[ $1 == heartbeat ]] && flags=(--heartbeat_timeout 1)
  [[ $1 == culprit ]] && stall=(--stall-in compute --stall-late-ms 300)
  ("$BUILD_DIR/bin/ddprun" --standalone --nproc_per_node="$NPROC" "${flags[@]}" --no_python \
    "$BUILD_DIR/bin/ddp-example-train" --epochs 1 --dataset-size 4096 --step-sleep-ms 20 \
    --stall-rank 1 --stall-at-step 3 "${stall[@]}" --checkpoint "$tmp/ckpt" 2>&1 || true) | late
}
torch() {
  ("$BUILD_DIR/bin/ddprun" --standalone --nproc_per_node="$NPROC" --section_timeouts step=2 --python "$PY" \
    tests/integration/torch/hang_culprit.py section 1 2>&1 || true) | late
}
summary() {  # $1: the case's name; stdin: one figure per line
  sort -n | awk -v s="$1" -v n="$NPROC" '
    { v[NR] = $1 } END { if (NR == 0) { printf "%-9s nproc=%s: no kill logged\n", s, n; exit }
      printf "%-9s nproc=%s reps=%d  median %d ms  max %d ms  (all: ", s, n, NR, v[int((NR + 1) / 2)], v[NR];
      for (i = 1; i <= NR; i++) printf "%s%s", v[i], (i < NR ? " " : ")\n") }'
}
for source in section heartbeat culprit; do
  for ((i = 0; i < REPS; i++)); do native "$source"; done | summary "$source"
done
if "$PY" -c 'import torch.distributed' 2>/dev/null; then
  for ((i = 0; i < REPS; i++)); do torch; done | summary torch
else
  echo "torch     skipped: $PY cannot import torch (scripts/setup.sh makes .venv with it)"
fi
if ((peers)); then
  echo
  BUILD_DIR=$BUILD_DIR scripts/bench/peers.sh hang --reps "$REPS"
fi
