#!/usr/bin/env bash
# Startup of a real PyTorch DDP script (torch_startup_train.py, 2 ranks, gloo),
# launched side by side by:
#   ddprun    build/bin/ddprun --standalone --nproc_per_node=2 --python /usr/bin/python3
#   torchrun  /usr/bin/python3 scripts/torchrun_compat.py --standalone --nproc_per_node=2
#             (default flags, and with --monitor_interval=0.1)
#   bare      two python processes started by this shell with the env:// variables
#             (rank 0 hosts torch's TCPStore), i.e. no launcher at all
# and a floor: `python3 -c 'import torch'`. For each, the median over N runs of
# the wall time to rank 0's first finished training step and of the total wall
# time; "launcher share" = total - import floor, and total - bare.
# Usage: scripts/bench/torch_startup.sh [N]   (default 5; launchers interleaved per repetition)
# Env: BUILD_DIR (default build), PYTHON (default /usr/bin/python3, where python3-torch lives).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
launcher_bench_args "$@"

train="$here/torch_startup_train.py"

now_ns() { date +%s%N; }

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
bare() {  # the same two ranks without a launcher
  local port; port=$(free_port)
  local env=(MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 LOCAL_WORLD_SIZE=2)
  env "${env[@]}" RANK=0 LOCAL_RANK=0 "$python" -u "$train" & local p0=$!
  env "${env[@]}" RANK=1 LOCAL_RANK=1 "$python" -u "$train" & local p1=$!
  wait "$p0" && wait "$p1"
}
ddprun() { "$build/bin/ddprun" --log-level=warn --standalone --nproc_per_node=2 --python "$python" "$train"; }
torchrun() { "$python" "$root/scripts/torchrun_compat.py" --standalone --nproc_per_node=2 "$train"; }
torchrun_fast() { "$python" "$root/scripts/torchrun_compat.py" --standalone --nproc_per_node=2 --monitor_interval=0.1 "$train"; }
import_floor() { "$python" -c 'import torch'; }

# One run: appends "first_ms total_ms" to $tmp/<name>.
measure() {  # name
  local name=$1 t0 t1 first
  t0=$(now_ns)
  if ! "$name" >"$tmp/out" 2>&1; then
    echo "torch_startup.sh: $name failed:" >&2; cat "$tmp/out" >&2; exit 1
  fi
  t1=$(now_ns)
  first=$(sed -n 's/.*first_step_ns=\([0-9]*\).*/\1/p' "$tmp/out" | head -1)
  if [[ "$name" != import_floor && -z "$first" ]]; then
    echo "torch_startup.sh: $name printed no first_step_ns line:" >&2; cat "$tmp/out" >&2; exit 1
  fi
  echo "$(( first ? (first - t0) / 1000000 : 0 )) $(( (t1 - t0) / 1000000 ))" >>"$tmp/$name"
}

names=(import_floor bare ddprun torchrun torchrun_fast)
echo "# $(nproc) cores, load average at start: $(load_average); torch $("$python" -c 'import torch; print(torch.__version__)'); $reps runs each, interleaved"
for ((r = 0; r < reps; r++)); do
  for n in "${names[@]}"; do measure "$n"; done
done
echo "# load average at end: $(load_average)"

col() { awk -v c="$2" '{print $c}' "$tmp/$1" | median; }
floor=$(col import_floor 2)
bare_total=$(col bare 2)
declare -A label=([bare]="no launcher (2 python processes from the shell)"
  [ddprun]="ddprun --standalone"
  [torchrun]="torchrun --standalone (defaults)"
  [torchrun_fast]="torchrun --standalone --monitor_interval=0.1")
echo
echo "import torch floor: ${floor} ms (median)"
echo
echo "| launcher | first step ms | total ms | total - import floor | total - no launcher |"
echo "|---|---:|---:|---:|---:|"
for n in bare ddprun torchrun torchrun_fast; do
  f=$(col "$n" 1); t=$(col "$n" 2)
  awk -v l="${label[$n]}" -v f="$f" -v t="$t" -v fl="$floor" -v b="$bare_total" \
    'BEGIN { printf "| %s | %.0f | %.0f | %.0f | %+.0f |\n", l, f, t, t - fl, t - b }'
done
