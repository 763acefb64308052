#!/usr/bin/env bash
# Containment benchmarks (docs/performance.md, "Containment"): kill -9 of
# ddprun until the last descendant of 8 workers x 4 children is gone, and a
# silent (SIGSTOPped) store until the workers are stopped, for a short and the
# default keep-alive. Needs ddprun, ddp-guard, ddp-rendezvousd and fake_worker
# in $BUILD_DIR/bin. Usage:
#   BUILD_DIR=build scripts/bench/containment.sh [orphans] [silent] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/../.."
export BUILD_DIR=${BUILD_DIR:-build}
for f in ddprun ddp-guard ddp-rendezvousd fake_worker; do
  [[ -x $BUILD_DIR/bin/$f ]] || { echo "missing $BUILD_DIR/bin/$f: build it first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
exec /usr/bin/python3 scripts/bench/containment_bench.py "$@"
