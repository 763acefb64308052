#!/usr/bin/env bash
# The launch floor (docs/performance.md, "Launch floor"): wall time of
#   ddprun --standalone --nproc_per_node=N --no_python /bin/true
# and the agent's own spawn time (round closed -> every worker started, the
# "startup" event's spawn_s), for N = 1 and 8, with every worker under its
# ddp-guard against the anchor in the same run: the same ddprun with no
# ddp-guard beside it (it warns and spawns the workers directly, without
# containment). Runs alternate, so load drifts hit both alike.
#   BUILD_DIR=build scripts/bench/launch_floor.sh [runs per case, default 40]
# OLD_BUILD_DIR=DIR adds a third column: another build's ddprun + ddp-guard
# (before/after a change).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
runs=${1:-40}
for f in ddprun ddp-guard; do
  [[ -x $BUILD_DIR/bin/$f ]] || { echo "missing $BUILD_DIR/bin/$f: build it first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/guarded" "$work/bare"
cp "$BUILD_DIR/bin/ddprun" "$BUILD_DIR/bin/ddp-guard" "$work/guarded/"
cp "$BUILD_DIR/bin/ddprun" "$work/bare/"
cases=(guarded bare)
if [[ -n ${OLD_BUILD_DIR:-} ]]; then
  mkdir -p "$work/old"
  cp "$OLD_BUILD_DIR/bin/ddprun" "$OLD_BUILD_DIR/bin/ddp-guard" "$work/old/"
  cases+=(old)
fi
# The bare ddprun must not find an installed guard either (its second place to look).
for g in /usr/local/bin/ddp-guard /usr/bin/ddp-guard; do
  if [[ -x $g ]]; then echo "note: $g is installed; the bare column may use it" >&2; fi
done

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
for n in 1 8; do
  for c in "${cases[@]}"; do : >"$work/wall_${c}_$n" && : >"$work/spawn_${c}_$n"; done
  for ((i = 0; i < runs; i++)); do
    for c in "${cases[@]}"; do
      rm -f "$work/ev.jsonl"
      start=$(date +%s%N)
      "$work/$c/ddprun" --standalone --nproc_per_node="$n" --no_python --event_log "$work/ev.jsonl" /bin/true \
        >/dev/null 2>&1
      end=$(date +%s%N)
      echo $(((end - start) / 1000)) >>"$work/wall_${c}_$n"
      sed -n 's/.*"event":"startup".*"spawn_s":\([0-9.e-]*\).*/\1/p' "$work/ev.jsonl" >>"$work/spawn_${c}_$n"
    done
  done
done
median() { sort -g "$1" | awk '{a[NR] = $1} END {if (NR == 0) print "nan"; else print a[int((NR + 1) / 2)]}'; }
printf '%-3s %-8s %12s %12s\n' N case "wall ms" "spawn ms"
for n in 1 8; do
  for c in "${cases[@]}"; do
    wall=$(median "$work/wall_${c}_$n")
    spawn=$(median "$work/spawn_${c}_$n")
    printf '%-3s %-8s %12.1f %12.1f\n' "$n" "$c" "$(echo "$wall / 1000" | bc -l)" "$(echo "$spawn * 1000" | bc -l)"
  done
  g=$(median "$work/wall_guarded_$n")
  b=$(median "$work/wall_bare_$n")
  printf '    guarded / bare wall: %.2f\n' "$(echo "$g / $b" | bc -l)"
done
echo "runs per case: $runs (medians)"
