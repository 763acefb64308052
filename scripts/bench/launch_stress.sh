#!/usr/bin/env bash
# Launches and restarts in a loop, counting hangs: the fault figures of
# docs/reliability.md, "Starting workers".
#
#   scripts/bench/launch_stress.sh [LAUNCHES] [RESTART_RUNS]
#
# LAUNCHES (default 2000) runs of `ddprun --standalone --nproc_per_node=32
# --no_python /bin/true`, each SIGKILLed after 30 s (a hang); then
# RESTART_RUNS (default 20) runs of 4 workers that fail at once with
# --max_restarts=300, each expected to end with "restarts=300/300".
# Uses $BUILD_DIR/bin/ddprun (default build/). Prints one line per part.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ddprun=${BUILD_DIR:-build}/bin/ddprun
launches=${1:-2000}
restart_runs=${2:-20}
err=$(mktemp)
trap 'rm -f "$err"' EXIT

hangs=0 failures=0 start=$SECONDS
for ((i = 1; i <= launches; i++)); do
  timeout -s KILL 30 "$ddprun" --standalone --nproc_per_node=32 --no_python /bin/true >/dev/null 2>"$err"
  rc=$?
  if ((rc == 137)); then
    ((hangs++))
    echo "launch $i hung" >&2
  elif ((rc != 0)); then
    ((failures++))
    echo "launch $i: exit $rc: $(tail -n 1 "$err")" >&2
  fi
done
echo "launches=$launches workers_each=32 hangs=$hangs failures=$failures seconds=$((SECONDS - start))"

bad=0 start=$SECONDS
for ((i = 1; i <= restart_runs; i++)); do
  timeout -s KILL 120 "$ddprun" --standalone --nproc_per_node=4 --max_restarts=300 --no_python \
    /bin/sh -c 'exit 1' >/dev/null 2>"$err"
  if ! grep -q 'restarts=300/300' "$err"; then
    ((bad++))
    echo "restart run $i did not use up its restarts: $(tail -n 1 "$err")" >&2
  fi
done
echo "restart_runs=$restart_runs restarts_each=300 bad=$bad seconds=$((SECONDS - start))"
((hangs + failures + bad == 0))
