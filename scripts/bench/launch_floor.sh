#!/usr/bin/env bash
# The launch floor (docs/performance.md, "Launch floor"): wall time of
#   ddprun --standalone --nproc_per_node=N --no_python /bin/true
# and the agent's own spawn time (round closed -> every worker started, the
# "startup" event's spawn_s), for N = 1 and 8, with every worker under its
# ddp-guard (forked by the guard server), against two anchors in the same
# run: the same binaries with DDP_GUARD_SERVER=0 (each guard exec'd), and the
# same ddprun with no ddp-guard beside it (it warns and spawns the workers
# directly, without containment). Runs alternate, so load drifts hit all alike.
#   BUILD_DIR=build scripts/bench/launch_floor.sh [runs per case, default 40]
# OLD_BUILD_DIR=DIR adds a column: another build's ddprun + ddp-guard
# (before/after a change), or its ddprun alone when it has no ddp-guard (a
# build from before containment, e.g. 24509ac: the issue's anchor).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
runs=${1:-40}
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "runs must be a positive integer, not '$runs'"
require_bins ddprun ddp-guard
mkdir -p "$tmp/guarded" "$tmp/bare"
cp "$build/bin/ddprun" "$build/bin/ddp-guard" "$tmp/guarded/"
cp "$build/bin/ddprun" "$tmp/bare/"
cases=(guarded exec bare)
if [[ -n ${OLD_BUILD_DIR:-} ]]; then
  [[ -x $OLD_BUILD_DIR/bin/ddprun ]] || bench_usage_error "OLD_BUILD_DIR: $OLD_BUILD_DIR/bin/ddprun not found; name a build directory"
  mkdir -p "$tmp/old"
  cp "$OLD_BUILD_DIR/bin/ddprun" "$tmp/old/"
  if [[ -x $OLD_BUILD_DIR/bin/ddp-guard ]]; then cp "$OLD_BUILD_DIR/bin/ddp-guard" "$tmp/old/"; fi
  cases+=(old)
fi
# The bare ddprun must not find an installed guard either (its second place to look).
for g in /usr/local/bin/ddp-guard /usr/bin/ddp-guard; do
  if [[ -x $g ]]; then echo "note: $g is installed; the bare column may use it" >&2; fi
done

echo "machine: $(nproc) cores, load $(load_average), $(uname -r)"
for n in 1 8; do
  for c in "${cases[@]}"; do : >"$tmp/wall_${c}_$n" && : >"$tmp/spawn_${c}_$n"; done
  for ((i = 0; i < runs; i++)); do
    for c in "${cases[@]}"; do
      dir=$c server=1
      [[ $c == exec ]] && dir=guarded server=0
      rm -f "$tmp/ev.jsonl"
      start=$(date +%s%N)
      DDP_GUARD_SERVER=$server "$tmp/$dir/ddprun" --standalone --nproc_per_node="$n" --no_python \
        --event_log "$tmp/ev.jsonl" /bin/true >/dev/null 2>&1
      end=$(date +%s%N)
      echo $(((end - start) / 1000)) >>"$tmp/wall_${c}_$n"
      sed -n 's/.*"event":"startup".*"spawn_s":\([0-9.e-]*\).*/\1/p' "$tmp/ev.jsonl" >>"$tmp/spawn_${c}_$n"
    done
  done
done
printf '%-3s %-8s %12s %12s\n' N case "wall ms" "spawn ms"
for n in 1 8; do
  for c in "${cases[@]}"; do
    wall=$(median <"$tmp/wall_${c}_$n")
    spawn=$(median <"$tmp/spawn_${c}_$n")
    # A build older than the "startup" event has no spawn time.
    [[ $spawn == nan ]] && spawn_ms=- || spawn_ms=$(printf '%.1f' "$(echo "$spawn * 1000" | bc -l)")
    printf '%-3s %-8s %12.1f %12s\n' "$n" "$c" "$(echo "$wall / 1000" | bc -l)" "$spawn_ms"
  done
  g=$(median <"$tmp/wall_guarded_$n")
  e=$(median <"$tmp/wall_exec_$n")
  b=$(median <"$tmp/wall_bare_$n")
  printf '    guarded / bare wall: %.2f   exec / bare wall: %.2f' "$(echo "$g / $b" | bc -l)" "$(echo "$e / $b" | bc -l)"
  if [[ -n ${OLD_BUILD_DIR:-} ]]; then
    printf '   guarded / old wall: %.2f' "$(echo "$g / $(median <"$tmp/wall_old_$n")" | bc -l)"
  fi
  echo
done
echo "runs per case: $runs (medians)"
