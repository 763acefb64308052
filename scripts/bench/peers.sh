#!/usr/bin/env bash
# The peers, side by side (docs/performance.md, "The peers: torchrun 2.x and
# ft_launcher beside ddprun"): ddprun, torchrun of torch 2.x and NVIDIA's
# ft_launcher (nvidia-resiliency-ext) on the same torch script
# (peers_train.py, gloo, CPU), in one run:
#   launch    launch -> first training step done on both ranks
#   failure   a worker exits 1 -> the restarted group's first all-reduce
#   nodekill  2 launchers, --nnodes=1:2, c10d: kill -9 of one -> survivors re-formed
#   nodekill-tuned  the same with last_call_timeout=1,keep_alive_interval=1 for all
#   hang      a rank stops -> killed by the launcher's watchdog (FileTimer, heartbeats)
# ddprun also runs with --preload torch, and PEERS_BASELINE_BUILD=DIR adds the
# ddprun of another build (DIR/bin/ddprun); --hogs N adds N busy loops.
# Torch and ft_launcher come from .venv (scripts/setup.sh --torch2 makes it with the
# pinned torch 2.x; this script adds scripts/requirements-peers.txt when
# missing). Usage:
#   BUILD_DIR=build scripts/bench/peers.sh [launch] [failure] [nodekill] [nodekill-tuned] [hang]
#       [--reps N] [--only NAME]... [--hogs N] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
export BUILD_DIR=${BUILD_DIR:-build}
venv=${PEERS_VENV:-.venv}
export PEERS_VENV=$venv
requirements=scripts/requirements-peers.txt
for f in ddprun ddp-guard; do
  [[ -x $BUILD_DIR/bin/$f ]] || { echo "peers.sh: missing $BUILD_DIR/bin/$f: build it first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
"$venv/bin/python" -c 'import torch' 2>/dev/null ||
  { echo "peers.sh: $venv/bin/python cannot import torch: run scripts/setup.sh --torch2 (it makes $venv with torch 2.x)" >&2; exit 2; }
want=$(sed -n 's/^nvidia-resiliency-ext==//p' "$requirements")
have_ft() {
  "$venv/bin/python" -c "import sys, importlib.metadata as m
sys.exit(m.version('nvidia-resiliency-ext') != '$want')" 2>/dev/null && [[ -x $venv/bin/ft_launcher ]]
}
if ! have_ft; then
  echo "peers.sh: installing nvidia-resiliency-ext $want into $venv ($requirements)"
  "$venv/bin/pip" install --disable-pip-version-check --no-input -q -r "$requirements"
  have_ft || { echo "peers.sh: $venv/bin/ft_launcher missing after installing $requirements" >&2; exit 1; }
fi
ver() { "$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))"; }
echo "machine: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "versions: $("$BUILD_DIR/bin/ddprun" --version) ($(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+changes')), torch $(ver torch), nvidia-resiliency-ext $(ver nvidia-resiliency-ext), $("$venv/bin/python" -V)"
status=0
/usr/bin/python3 scripts/bench/peers_bench.py "$@" || status=$?
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
