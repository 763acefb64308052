#!/usr/bin/env bash
# Store benchmark, side by side in one run (figures go to docs/performance.md):
#   1. ddp-rendezvousd on a free port; `ddp-bench store --clients 4 --op get` against it;
#   2. the same 4-client get workload against PyTorch's TCPStore (Debian's
#      python3-torch: a torch TCPStore server and 4 Python client processes);
#   3. the ratio of the two;
#   4. 10,000 idle connections held by the daemon, with its RSS.
# Usage: scripts/bench/store_vs_torch.sh [--ops N] [--clients N] [--idle N]
# Env: BUILD_DIR (default build), PYTHON (default /usr/bin/python3, where python3-torch lives).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
ops=50000
clients=4
idle=10000
declare -A bench_flags=([--ops]=ops [--clients]=clients [--idle]=idle)
parse_flags 2,10 "$@"
require_bins ddp-rendezvousd ddp-bench

# The daemon gets the hard fd limit too, so it can hold the idle connections.
ulimit -n "$(ulimit -Hn)"
"$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$tmp/port" --log-level warn \
  >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
pids+=("$daemon_pid")
wait_port "$tmp/port" daemon
endpoint="127.0.0.1:$(cat "$tmp/port")"

echo "# $(nproc) cores; $clients clients x $ops gets each"
ours="$("$build/bin/ddp-bench" store --clients "$clients" --ops "$ops" --op get --endpoint "$endpoint")"
echo "$ours"
theirs="$("$python" "$here/torch_store_bench.py" --clients "$clients" --ops "$ops")"
echo "$theirs"
rate() { sed -n 's/.*ops_per_s=\([0-9.]*\).*/\1/p' <<<"$1"; }
awk -v a="$(rate "$ours")" -v b="$(rate "$theirs")" \
  'BEGIN { printf "ratio ddp/torch get ops_per_s=%.1fx (goal >= 10x)\n", a / b }'

if [[ "$idle" -gt 0 ]]; then
  "$build/bin/ddp-bench" store --idle-connections "$idle" --endpoint "$endpoint" --server-pid "$daemon_pid"
fi
