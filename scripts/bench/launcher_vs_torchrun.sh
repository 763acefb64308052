#!/usr/bin/env bash
# ddprun vs torchrun (Debian's python3-torch), side by side on this machine:
#   1. wall time of `--standalone --nproc_per_node=N` of a no-op worker (/bin/true
#      via --no_python), N = 1 2 4 8; torchrun with default flags and with
#      --monitor_interval=0.1
#   2. worker exit -> replacement worker running (fake_worker FAKE_PID_FILE
#      timestamps: exit line of attempt 0 -> start line of attempt 1)
#   3. agent RSS while one worker runs
# Usage: BUILD_DIR=build scripts/bench/launcher_vs_torchrun.sh [reps_ddprun] [reps_torchrun]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
DDPRUN=$BUILD_DIR/bin/ddprun
FAKE=$BUILD_DIR/bin/fake_worker
PY=${TORCH_PYTHON:-/usr/bin/python3}
REPS=${1:-20}
TREPS=${2:-3}
for f in "$DDPRUN" "$FAKE"; do
  [[ -x $f ]] || { echo "missing $f: build ddprun and fake_worker first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
"$PY" -c 'import torch' 2>/dev/null || { echo "$PY cannot import torch (apt install python3-torch)" >&2; exit 2; }

work=$(mktemp -d -t ddprun-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
# torchrun with the Std.from_str patch Debian's torch 1.13 needs on Python 3.11.
torchrun() { "$PY" "$(dirname "$0")/../torchrun_compat.py" "$@"; }
ddprun() { "$DDPRUN" --log-level=warn "$@"; }

now_ns() { date +%s%N; }
# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# wall ms of one run of "$@" (output discarded, must succeed)
wall_ms() {
  local t0 t1
  t0=$(now_ns)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; return 1; }
  t1=$(now_ns)
  echo $(( (t1 - t0) / 1000000 ))
}
repeat_ms() {  # reps cmd...
  local reps=$1; shift
  for ((i = 0; i < reps; i++)); do wall_ms "$@"; done | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.0fx" : "n/a"), a / (b > 0 ? b : 1) }'; }

echo "machine: $(nproc) cores, $(uname -r); torch $("$PY" -c 'import torch; print(torch.__version__)')"
echo
echo "1. wall time, --standalone --nproc_per_node=N --no_python /bin/true (median ms; ddprun x$REPS, torchrun x$TREPS)"
printf "%-4s %10s %16s %22s %12s %12s\n" N ddprun torchrun "torchrun(monitor 0.1)" "vs default" "vs 0.1"
for n in 1 2 4 8; do
  d=$(repeat_ms "$REPS" ddprun --standalone --nproc_per_node=$n --no_python /bin/true)
  t=$(repeat_ms "$TREPS" torchrun --standalone --nproc_per_node=$n --no_python /bin/true)
  tm=$(repeat_ms "$TREPS" torchrun --standalone --nproc_per_node=$n --monitor_interval=0.1 --no_python /bin/true)
  printf "%-4s %10s %16s %22s %12s %12s\n" "$n" "$d" "$t" "$tm" "$(ratio "$t" "$d")" "$(ratio "$tm" "$d")"
done

echo
echo "2. worker exit -> replacement worker running (ms, median of $TREPS; --max_restarts=1, 1 worker)"
restart_ms() {  # launcher args...
  local pids=$work/pids.$RANDOM
  FAKE_FAIL_ON_RESTART_BELOW=1 FAKE_PID_FILE=$pids "$@" --standalone --nproc_per_node=1 --max_restarts=1 \
    --no_python "$FAKE" >/dev/null 2>&1
  awk '$3 == "exit" && !e {e = $4} $3 == "start" {s = $4} END {printf "%.2f\n", (s - e) / 1e6}' "$pids"
}
d=$(for ((i = 0; i < REPS; i++)); do restart_ms ddprun; done | median)
tm=$(for ((i = 0; i < TREPS; i++)); do restart_ms torchrun --monitor_interval=0.1; done | median)
printf "ddprun %s ms, torchrun(monitor 0.1) %s ms, ratio %s\n" "$d" "$tm" "$(ratio "$tm" "$d")"

echo
echo "3. agent RSS while one worker runs (MiB, VmRSS of the launcher process)"
rss_mib() {  # launcher command (a binary, not a shell function: $! must be the launcher)
  ( exec "$@" --standalone --nproc_per_node=1 --no_python "$FAKE" >/dev/null 2>&1 ) &
  local pid=$! rss=0
  for ((i = 0; i < 100; i++)); do  # the worker sleeps 3 s; sample once it is up
    if [[ -s $work/rss.pids ]]; then
      sleep 0.5
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      break
    fi
    sleep 0.05
  done
  wait "$pid" || true
  rm -f "$work/rss.pids"
  awk -v k="$rss" 'BEGIN { printf "%.1f\n", k / 1024 }'
}
export FAKE_SLEEP_MS=3000 FAKE_PID_FILE=$work/rss.pids
d=$(rss_mib "$DDPRUN" --log-level=warn)
t=$(rss_mib "$PY" "$(dirname "$0")/../torchrun_compat.py")
unset FAKE_SLEEP_MS FAKE_PID_FILE
printf "ddprun %s MiB, torchrun %s MiB, ratio %s\n" "$d" "$t" "$(ratio "$t" "$d")"
