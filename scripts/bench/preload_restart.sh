#!/usr/bin/env bash
# Torch worker failure -> the replacement's first collective (docs/performance.md,
# "Restarting torch workers: `--preload torch`"): 2 ranks (gloo, one node), rank 1 exits 1
# after its first all_reduce; the time from that exit to the end of the first
# all_reduce of the restarted group (the later of the two ranks), under
#   ddprun --preload torch   build/bin/ddprun --standalone --nproc_per_node=2 --max_restarts=1 --preload torch
#   ddprun                   the same without --preload
#   torchrun                 scripts/torchrun_compat.py --standalone --nproc_per_node=2 --max_restarts=1
#                            --monitor_interval=0.1 (its default of 5 s would add up to 5 s)
# interleaved per repetition, same script, median (min-max) over N runs.
# Usage: scripts/bench/preload_restart.sh [N]   (default 5)
# Env: BUILD_DIR (default build), PYTHON (default /usr/bin/python3, where python3-torch lives).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
launcher_bench_args "$@"

train="$here/preload_restart_train.py"

ddprun_preload() {
  "$build/bin/ddprun" --log-level=warn --standalone --nproc_per_node=2 --max_restarts=1 --stop_timeout=5 \
    --python "$python" --preload torch "$train"
}
ddprun_plain() {
  "$build/bin/ddprun" --log-level=warn --standalone --nproc_per_node=2 --max_restarts=1 --stop_timeout=5 \
    --python "$python" "$train"
}
torchrun_fast() {
  "$python" "$root/scripts/torchrun_compat.py" --standalone --nproc_per_node=2 --max_restarts=1 \
    --monitor_interval=0.1 "$train"
}

measure() {  # name: appends the failure -> first collective ms to $tmp/<name>
  local name=$1 fail last
  if ! "$name" >"$tmp/out" 2>&1; then
    echo "preload_restart.sh: $name failed:" >&2; cat "$tmp/out" >&2; exit 1
  fi
  fail=$(sed -n 's/.*fail_ns=\([0-9]*\).*/\1/p' "$tmp/out" | head -1)
  last=$(sed -n 's/.*first_collective_ns=\([0-9]*\).*/\1/p' "$tmp/out" | sort -n | tail -1)
  if [[ -z "$fail" || -z "$last" ]]; then
    echo "preload_restart.sh: $name printed no fail_ns/first_collective_ns line:" >&2; cat "$tmp/out" >&2; exit 1
  fi
  echo $(( (last - fail) / 1000000 )) >>"$tmp/$name"
}

names=(ddprun_preload ddprun_plain torchrun_fast)
echo "# $(nproc) cores, load average at start: $(load_average); torch $("$python" -c 'import torch; print(torch.__version__)'); $reps runs each, interleaved"
for ((r = 0; r < reps; r++)); do
  for n in "${names[@]}"; do measure "$n"; done
done
echo "# load average at end: $(load_average)"

stats() { sort -g "$tmp/$1" | awk '{a[NR]=$1} END {m=(NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); printf "%.0f (%d-%d)", m, a[1], a[NR]}'; }
declare -A label=([ddprun_preload]="ddprun --preload torch" [ddprun_plain]="ddprun"
  [torchrun_fast]="torchrun --monitor_interval=0.1")
t=$(median <"$tmp/torchrun_fast")
echo
echo "| launcher | failure -> replacement's first collective, ms, median (min-max) | vs torchrun |"
echo "|---|---:|---:|"
for n in "${names[@]}"; do
  m=$(median <"$tmp/$n")
  awk -v l="${label[$n]}" -v s="$(stats "$n")" -v m="$m" -v t="$t" 'BEGIN { printf "| %s | %s | %.2f |\n", l, s, m / t }'
done
