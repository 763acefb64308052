#!/usr/bin/env bash
# Launch to first step of a worker SDK trainer (docs/performance.md, "Re-form
# in place", Gloo's event loop): ddp-example-train (one short epoch) under
#   ddprun --standalone --nproc_per_node=N --event_log F
# for N = 2, 4 and 8; the figure is the `first_step` event's first_step_s
# (ddprun's start of the attempt -> every rank's first step done), which
# includes the Gloo group's full-mesh connect. Medians of the runs.
#   BUILD_DIR=build scripts/bench/sdk_first_step.sh [--runs N]
# OLD_BUILD_DIR=DIR adds a column: another build's ddprun and trainer, run
# alternately with this one, and their ratio.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
runs=9
declare -A bench_flags=([--runs]=runs)
parse_flags 2,10 "$@"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "--runs must be a positive integer, not '$runs'"
require_bins ddprun ddp-example-train
builds=(new)
declare -A dir=([new]="$build/bin")
if [[ -n "${OLD_BUILD_DIR:-}" ]]; then
  for b in ddprun ddp-example-train; do
    [[ -x "$OLD_BUILD_DIR/bin/$b" ]] || bench_usage_error "$OLD_BUILD_DIR/bin/$b not found (OLD_BUILD_DIR)"
  done
  builds+=(old)
  dir[old]="$OLD_BUILD_DIR/bin"
fi
echo "machine: $(nproc) cores, load $(load_average)"

first_step_ms() {  # bin_dir n: one run's first_step_s, in ms
  local ev="$tmp/events.jsonl"
  rm -f "$ev"
  "$1/ddprun" --standalone --nproc_per_node="$2" --event_log "$ev" --no_python "$1/ddp-example-train" \
    --epochs 1 --dataset-size 1024 --checkpoint "$tmp/ckpt" >"$tmp/run.log" 2>&1 || {
    echo "$bench_name: a run of $2 ranks failed:" >&2
    cat "$tmp/run.log" >&2
    exit 1
  }
  sed -n 's/.*"event":"first_step".*"first_step_s":\([0-9.e-]*\).*/\1/p' "$ev" | awk '{ printf "%.2f\n", $1 * 1000 }'
}

printf '%-6s' ranks
for b in "${builds[@]}"; do printf '%12s' "$b ms"; done
[[ ${#builds[@]} -eq 2 ]] && printf '%12s' "new / old"
echo
for n in 2 4 8; do
  for b in "${builds[@]}"; do : >"$tmp/$b.$n"; done
  for ((i = 0; i < runs; i++)); do
    for b in "${builds[@]}"; do first_step_ms "${dir[$b]}" "$n" >>"$tmp/$b.$n"; done
  done
  printf '%-6s' "$n"
  declare -A med=()
  for b in "${builds[@]}"; do
    med[$b]=$(printf '%.1f' "$(median <"$tmp/$b.$n")")
    printf '%12s' "${med[$b]}"
  done
  [[ ${#builds[@]} -eq 2 ]] && printf '%12.2f' "$(echo "${med[new]} / ${med[old]}" | bc -l)"
  echo
done
echo "runs per case: $runs (medians)"
