#!/usr/bin/env bash
# Cost of collecting the stacks of 8 local workers (ddprun's SIGURG dump):
# the time from "stack dump requested" to "workers' stacks written" in
# ddprun's log, for Python workers (faulthandler) and native ones (eu-stack
# or gdb). Usage: [DDPRUN_PATH=dirs] scripts/bench/stacks.sh [build dir] [repeats]
# (DDPRUN_PATH: the PATH ddprun sees, e.g. a directory with only gdb and
# timeout to measure gdb where elfutils is installed)
set -euo pipefail
build=${1:-build}
repeats=${2:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'import time\nprint("ready", flush=True)\nwhile True:\n    time.sleep(0.05)\n' >"$tmp/wait.py"

ms() { date -d "$1" +%s%3N; }

measure() {  # kind, ddprun args...
  local kind=$1
  shift
  for i in $(seq "$repeats"); do
    env ${DDPRUN_PATH:+PATH=$DDPRUN_PATH} "$build/bin/ddprun" --nproc_per_node=8 --log_dir "$tmp/logs" --rdzv_id="$kind$i" "$@" >"$tmp/out" 2>"$tmp/err" &
    local pid=$!
    until [ "$(grep -c -e ready -e 'out 0 of rank' "$tmp/out" || true)" -ge 8 ]; do sleep 0.1; done
    kill -URG "$pid"
    until grep -q "workers' stacks written" "$tmp/err"; do sleep 0.1; done
    local t0 t1
    t0=$(grep "stack dump requested" "$tmp/err" | sed 's/^\[\([^]]*\)\].*/\1/')
    t1=$(grep "workers' stacks written" "$tmp/err" | sed 's/^\[\([^]]*\)\].*/\1/')
    echo "$kind run $i: $(($(ms "$t1") - $(ms "$t0"))) ms"
    kill -TERM "$pid"
    wait "$pid" || true
  done
}

measure python --python /usr/bin/python3 "$tmp/wait.py"
FAKE_HANG=1 FAKE_PRINT=1 measure native --no_python "$build/bin/fake_worker"
