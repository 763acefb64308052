#!/usr/bin/env bash
# A torch job that grows and shrinks in place, over and over: the fault figures
# of docs/reliability.md, "Grow and shrink cycles under re-form".
#
#   PYTHON=.venv/bin/python scripts/bench/reform_grow_cycles.sh [CYCLES] [OUT_DIR]
#
# Two nodes (agents of 2 workers each, --nnodes=1:3, --on_failure=reform) run
# python/examples/reform_ddp.py on one ddp-rendezvousd. Each cycle starts a
# third node, waits until the four original ranks re-formed with its two (a
# grow), then kill -9s its agent and waits until they re-formed without it (a
# shrink). A grow not done within 120 s is a stall: the script saves the
# nodes' output and every worker's thread stacks (gdb) under OUT_DIR and
# stops. Prints one line per cycle, then a summary: cycles done, stalls, the
# median and the slowest grow, and how many ranks left a step blocked in
# Gloo on their own ("Exiting so that ddprun replaces this rank").
# Needs torch 2.x ($PYTHON) and $BUILD_DIR's ddprun and ddp-rendezvousd.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cycles=${1:-100}
[[ "$cycles" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "CYCLES '$cycles' is not a positive number"
require_bins ddprun ddp-rendezvousd
require_torch
out=${2:-$(mktemp -d /tmp/reform_grow_cycles.XXXXXX)}
mkdir -p "$out"
cd "$root"

"$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$out/port" --log-level warn \
  >"$out/daemon.log" 2>&1 &
daemon=$!
pids=()
cleanup() {
  kill -9 "${pids[@]}" "$daemon" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do [[ -s "$out/port" ]] && break; sleep 0.1; done
[[ -s "$out/port" ]] || bench_usage_error "ddp-rendezvousd wrote no port file ($out/daemon.log)"
port=$(cat "$out/port")

export PYTHONPATH="$root/python" PYTHONUNBUFFERED=1 DDP_LOG_LEVEL=info
# Past the grow's 120 s: a rank that never joins shows here as a stall, not as a slot the others give up.
export DDP_REFORM_STALL_TIMEOUT=150
unset OMP_NUM_THREADS
node() {  # name
  exec "$build/bin/ddprun" --python "$python" --nnodes=1:3 --nproc_per_node=2 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=cycles \
    --rdzv_conf=join_timeout=120,last_call_timeout=3,keep_alive_interval=0.5 --local_addr="$1" \
    --on_failure=reform --max_restarts=1000 python/examples/reform_ddp.py --steps 1000000000 \
    --step-sleep-ms 15
}
node nodea >"$out/a.log" 2>&1 &
a=$!
node nodeb >"$out/b.log" 2>&1 &
b=$!
pids+=("$a" "$b")
count() { cat "$out/a.log" "$out/b.log" | grep -c -- "$1" || true; }
alive() { kill -0 "$a" 2>/dev/null && kill -0 "$b" 2>/dev/null; }
for _ in $(seq 1800); do (($(count ': started, rank') >= 4)) && break; sleep 0.1; done
(($(count ': started, rank') >= 4)) || { echo "$bench_name: the two nodes did not start (see $out)" >&2; exit 1; }

grows=() stalls=0 done=0
for ((i = 1; i <= cycles; i++)); do
  before=$(count ' of 6 (')
  t0=$(date +%s.%N)
  node nodec >"$out/c.log" 2>&1 &
  c=$!
  pids+=("$c")
  ok=0
  for _ in $(seq 1200); do
    (($(count ' of 6 (') >= before + 4)) && { ok=1; break; }
    alive || break
    sleep 0.1
  done
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  if ((ok == 0)); then
    ((stalls++)) || true
    echo "cycle $i: the grow did not complete in $took s: output and stacks in $out/stall.$i" >&2
    mkdir -p "$out/stall.$i"
    cp "$out"/a.log "$out"/b.log "$out"/c.log "$out/stall.$i/"
    for p in $(pgrep -f "reform_ddp.py --steps 1000000000" || true); do
      timeout 60 gdb -p "$p" -batch -ex "thread apply all bt" >"$out/stall.$i/gdb.$p" 2>&1 || true
    done
    break
  fi
  grows+=("$took")
  sleep $((RANDOM % 4))
  after=$(count ' of 4 (')
  kill -9 "$c"
  wait "$c" 2>/dev/null || true
  for _ in $(seq 600); do (($(count ' of 4 (') >= after + 4)) && break; sleep 0.1; done
  (($(count ' of 4 (') >= after + 4)) || { echo "cycle $i: the shrink did not complete in 60 s (see $out)" >&2; break; }
  done=$i
  echo "cycle $i: grow $took s, shrink done"
done
sorted=$(printf '%s\n' "${grows[@]}" | sort -n)
n=${#grows[@]}
median=$( ((n > 0)) && echo "$sorted" | sed -n "$(((n + 1) / 2))p" || echo -)
slowest=$( ((n > 0)) && echo "$sorted" | tail -n 1 || echo -)
wedged=$(cat "$out"/a.log "$out"/b.log | grep -c "Exiting so that ddprun replaces this rank" || true)
echo "cycles=$done stalls=$stalls grow_median_s=$median grow_slowest_s=$slowest wedged_exits=$wedged out=$out"
((stalls == 0))
