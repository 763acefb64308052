#!/usr/bin/env bash
# Elastic rendezvous benchmarks (docs/performance.md, "Elastic"): failure
# fan-out, dead node (default and short keep-alive), and 2 agents x 2 workers
# from launch to a finished store barrier beside torchrun's c10d backend.
# Needs ddprun, ddp-rendezvousd and fake_worker in $BUILD_DIR/bin and Debian's
# python3-torch; ddp-store for the native e2e worker. Usage:
#   BUILD_DIR=build scripts/bench/elastic.sh [fanout] [deadnode] [restart] [reform] [e2e] [--reps N] [--torch-reps N]
set -euo pipefail
cd "$(dirname "$0")/../.."
export BUILD_DIR=${BUILD_DIR:-build}
for f in ddprun ddp-rendezvousd fake_worker ddp-store; do
  [[ -x $BUILD_DIR/bin/$f ]] || { echo "missing $BUILD_DIR/bin/$f: build it first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
exec /usr/bin/python3 scripts/bench/elastic_bench.py "$@"
