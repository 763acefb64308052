#!/usr/bin/env bash
# Hot spare swap (docs/performance.md, "Hot spares"): a job of 2 nodes at MAX
# (--nnodes=2:2, last call 5 s) on a ddp-rendezvousd, a third agent waiting
# as a hot spare; kill -9 of a member, then the time until the spare's worker
# runs, and until the survivor's new worker runs too (the world complete: the
# survivor first waits out the fence, keep_alive_interval / 2, docs/
# rendezvous.md "Fencing"). Times are the fake_workers' own start stamps; a
# fresh job per rep. Usage:
#   BUILD_DIR=build scripts/bench/spare_swap.sh [--reps N] [--keep_alive SECONDS]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
reps=10
keep_alive=0.2
declare -A bench_flags=([--reps]=reps [--keep_alive]=keep_alive)
parse_flags 2,9 "$@"
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "--reps must be a positive integer, not '$reps'"
[[ "$keep_alive" =~ ^[0-9]*\.?[0-9]+$ ]] || bench_usage_error "--keep_alive must be seconds, not '$keep_alive'"
require_bins ddprun ddp-rendezvousd fake_worker
echo "machine: $(nproc) cores, load $(load_average)"

"$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$tmp/ddp.port" --log-level warn \
  >"$tmp/ddp.log" 2>&1 &
pids+=($!)
wait_port "$tmp/ddp.port" ddp-rendezvousd
ep="127.0.0.1:$(cat "$tmp/ddp.port")"
conf="last_call_timeout=5,keep_alive_interval=$keep_alive,keep_alive_max_attempt=3,join_timeout=60"

agent() {  # run_id name host: starts one agent in the background, its pid in $agent_pid
  local dir="$tmp/$1/$2"
  mkdir -p "$dir"
  FAKE_HANG=1 FAKE_PID_FILE="$dir/pids" "$build/bin/ddprun" --nnodes=2:2 --nproc_per_node=1 \
    --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id="$1" --rdzv_conf="$conf" --max_restarts=100 \
    --local_addr="127.0.0.$3" "$build/bin/fake_worker" >"$dir/log" 2>&1 &
  agent_pid=$!
  pids+=("$agent_pid")
}

wait_for() {  # seconds command...: polls until the command succeeds
  local until=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < until)) || { echo "$bench_name: timed out waiting for: $*" >&2; exit 1; }
    sleep 0.01
  done
}
started() { [[ -s "$1" ]] && grep -q ' start ' "$1"; }
restarted() { (($(grep -c ' start ' "$1") >= 2)); }

swaps=()
worlds=()
for ((i = 0; i < reps; i++)); do
  run="swap$i"
  agent "$run" a 2; a=$agent_pid
  agent "$run" b 3; b=$agent_pid
  wait_for 30 started "$tmp/$run/a/pids"
  wait_for 30 started "$tmp/$run/b/pids"
  agent "$run" s 4; s=$agent_pid
  wait_for 30 grep -q 'hot spare:' "$tmp/$run/s/log"
  t0=$(date +%s%N)
  kill -9 "$a"
  wait "$a" 2>/dev/null || true
  wait_for 30 started "$tmp/$run/s/pids"
  t1=$(awk '/ start / {print $4; exit}' "$tmp/$run/s/pids")
  swaps+=("$(((t1 - t0) / 1000))")
  # The survivor's new worker: the new world is complete once it runs too.
  wait_for 30 restarted "$tmp/$run/b/pids"
  t2=$(awk '/ start / {t = $4} END {print t}' "$tmp/$run/b/pids")
  worlds+=("$((((t2 > t1 ? t2 : t1) - t0) / 1000))")
  grep -q 'last call over' "$tmp/$run/s/log" "$tmp/$run/b/log" && echo "rep $i: the last call was waited" >&2
  kill "$b" "$s" 2>/dev/null || true
  wait "$b" "$s" 2>/dev/null || true
  pids=("${pids[0]}")  # the daemon only
done
summary() {  # label: the numbers (microseconds) on stdin
  sort -n | awk -v r="$reps" -v k="$keep_alive" -v l="$1" '
    { v[NR] = $1 / 1000 } END {
      printf "%s: keep_alive_interval=%ss reps=%d  median %.1f ms  min %.1f  max %.1f ms  (all:", l, k, r,
        (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR];
      for (i = 1; i <= NR; i++) printf " %.1f", v[i]; print ")" }'
}
printf '%s\n' "${swaps[@]}" | summary "kill -9 of a member -> spare's worker running"
printf '%s\n' "${worlds[@]}" | summary "kill -9 of a member -> both workers of the new world running"
