#!/bin/bash
# What --fsync=always costs (docs/performance.md, "Durable writes"): a daemon
# with --data-dir and --fsync=always, then =never, then without a data dir;
# against each, ddp-bench store (sets from 1, 4 and 16 clients: ops/s, p50,
# p99) and, with --rendezvous, ddp-bench rendezvous of 10,000 agents.
# Usage: BUILD_DIR=build OPS=5000 scripts/bench/fsync_cost.sh [--rendezvous]
# The data dirs are made under $TMPDIR (the disk measured).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD_DIR:-build}/bin
rendezvous=0
[[ ${1:-} == --rendezvous ]] && rendezvous=1
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in always never none; do
  d=$(mktemp -d "${TMPDIR:-/tmp}/fsync-cost.XXXXXX")
  extra=(--data-dir "$d/data" --fsync "$mode")
  [[ $mode == none ]] && extra=()
  "$B/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$d/p" --log-level warn "${extra[@]}" &
  pid=$!
  while [[ ! -s $d/p ]]; do sleep 0.05; done
  ep=127.0.0.1:$(cat "$d/p")
  echo "== fsync=$mode"
  "$B/ddp-bench" store --endpoint "$ep" --op set --clients 1 4 16 --ops "${OPS:-5000}"
  if ((rendezvous)); then "$B/ddp-bench" rendezvous --endpoint "$ep" --agents 10000 | tail -n 1; fi
  "$B/ddp-store" --endpoint "$ep" stat | grep -E '^log_fsyncs' || true
  kill "$pid"
  wait "$pid" || true
  rm -rf "$d"
done
