#!/usr/bin/env bash
# torchreform stress: an 8-rank torch job (two nodes of 4 and a hot spare,
# --preload torch) killed 30 times, taking turns: one rank, two ranks within
# 400 ms, a node's agent. Each kill must end in a generation of all 8 ranks
# with the survivors in their processes: no stall, no fall-back to a restart
# (scripts/bench/reform_kill_cycles.sh; its 150-cycle runs are in
# docs/reliability.md). Keeps the nodes' output only when it fails.
#   kill_cycles_test.sh PYTHON BUILD_DIR
set -euo pipefail
python=$1 build=$2
if ! "$python" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  if [[ -n "${CI:-}" ]]; then
    echo "$python cannot import torch 2.x under CI; run scripts/setup.sh --torch2" >&2
    exit 1
  fi
  echo "SKIP: $python cannot import torch 2.x (scripts/setup.sh --torch2 makes .venv)"
  exit 0
fi
out=$(mktemp -d /tmp/ddp-kill-cycles.XXXXXX)
if PYTHON=$python BUILD_DIR=$build PRELOAD=torch "$(dirname "$0")/../../../scripts/bench/reform_kill_cycles.sh" 30 "$out"; then
  rm -rf "$out"
else
  echo "the kill cycles failed: the nodes' output (and any stall's stacks) in $out" >&2
  exit 1
fi
