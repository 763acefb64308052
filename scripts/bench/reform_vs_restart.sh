#!/usr/bin/env bash
# Re-form in place against restart (docs/performance.md, "Re-form in place: a
# SIGKILLed rank"): ddp-example-train-reform on 4 CPU (Gloo) workers under
# `ddprun --standalone`, slot 3 SIGKILLing itself after step --kill_at, once
# with --on_failure=reform (a replacement joins the survivors' processes) and
# once with --on_failure=restart (every worker restarts; rank 0 resumes from the
# checkpoint of the last epoch's end). Each run's rank 0 prints the time from
# the SIGKILL to the next completed step and the steps of work lost; this script
# prints them per rep, their medians, the ratio, one step's time, and checks
# that both runs end with the same final loss. Usage:
#   BUILD_DIR=build scripts/bench/reform_vs_restart.sh [--reps N] [--kill_at STEP] [--epochs E]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
reps=3
kill_at=100
epochs=3
declare -A bench_flags=([--reps]=reps [--kill_at]=kill_at [--epochs]=epochs)
parse_flags 2,11 "$@"
for v in reps kill_at epochs; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "--$v must be a positive integer, not '${!v}'"
done
require_bins ddprun ddp-example-train-reform
echo "machine: $(nproc) cores, load $(load_average)"
# 8192 samples, 32 per rank and step: 64 steps per epoch on 4 ranks.
((kill_at < epochs * 64)) || bench_usage_error "--kill_at must be below --epochs x 64 = $((epochs * 64))"

run_policy() {  # policy rep: one job; its output in $tmp/<policy><rep>.log
  local log="$tmp/$1$2.log"
  "$build/bin/ddprun" --standalone --nproc_per_node=4 --on_failure="$1" --max_restarts=1 --no_python \
    "$build/bin/ddp-example-train-reform" --epochs "$epochs" --checkpoint "$tmp/$1$2.ckpt" \
    --kill-every "$kill_at" --kills 1 >"$log" 2>&1 || {
    echo "$bench_name: the $1 run failed:" >&2
    cat "$log" >&2
    exit 1
  }
}

# cost policy rep: "<ms> <steps lost>" from the run's report line.
cost() {
  sed -n -E 's/.*rank killed -> next step ([0-9.]+) ms.*steps lost ([0-9-]+).*/\1 \2/p' "$tmp/$1$2.log" | head -1
}
final() { sed -n -E 's/.*final loss ([0-9.]+) after.*/\1/p' "$tmp/$1$2.log" | head -1; }
step_ms() { sed -n -E 's/.*epoch 1\/[0-9]+ loss [0-9.]+ step [0-9]+ step_ms ([0-9.]+).*/\1/p' "$tmp/$1$2.log"; }

median_1() { printf '%.1f' "$(median)"; }  # lib.sh's, to 0.1

for ((i = 0; i < reps; i++)); do
  for policy in reform restart; do
    run_policy "$policy" "$i"
    read -r ms lost < <(cost "$policy" "$i") || true
    [[ -n "${ms:-}" ]] || { echo "$bench_name: no cost line in the $policy run:" >&2; cat "$tmp/$policy$i.log" >&2; exit 1; }
    echo "rep $i $policy: rank killed -> next step $ms ms, steps lost $lost, one step $(step_ms "$policy" "$i") ms," \
      "final loss $(final "$policy" "$i")"
    echo "$ms" >>"$tmp/$policy.ms"
    # shellcheck disable=SC2005  # one line per rep, an empty one when the log has no step time
    echo "$(step_ms "$policy" "$i")" >>"$tmp/step.ms"
  done
  [[ "$(final reform "$i")" == "$(final restart "$i")" ]] ||
    echo "rep $i: the final losses differ: reform $(final reform "$i"), restart $(final restart "$i")" >&2
done
reform_ms=$(median_1 <"$tmp/reform.ms")
restart_ms=$(median_1 <"$tmp/restart.ms")
step=$(median_1 <"$tmp/step.ms")
reform_lost=$(cost reform 0 | cut -d' ' -f2)
restart_lost=$(cost restart 0 | cut -d' ' -f2)
echo "reform (--on_failure=reform, 4 workers, slot 3 killed after step $kill_at): median $reform_ms ms," \
  "steps lost $reform_lost"
echo "restart (--on_failure=restart, resume from the epoch checkpoint): median $restart_ms ms," \
  "steps lost $restart_lost"
# Back where the kill happened: the cost plus the lost steps done again.
awk -v a="$restart_ms" -v b="$reform_ms" -v s="$step" -v la="$restart_lost" -v lb="$reform_lost" 'BEGIN {
  printf "ratio restart / reform: %.1fx; one step %.2f ms; goal <= 50 ms + one step = %.1f ms: %s\n",
    a / b, s, 50 + s, (b <= 50 + s ? "met" : "not met")
  printf "back at the step of the kill: reform %.1f ms, restart %.1f ms (cost + steps lost x one step)\n",
    b + lb * s, a + la * s }'
