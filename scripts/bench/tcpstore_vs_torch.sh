#!/usr/bin/env bash
# TCPStore-protocol throughput, torch's own server vs ddp-rendezvousd, in one run.
# Starts PyTorch's TCPStore server (torch_tcpstore_server.py: TCPStore(host, 0,
# 1, True) in Debian's /usr/bin/python3) and `ddp-rendezvousd --port 0`, then
# drives both with the same C++ clients, `ddp-bench store --protocol tcpstore`
# (torch 1.x wire protocol, one blocking connection per client thread), for
# get, set and add at each client count. Each cell runs --repeat times,
# alternating which server goes first; the table shows the median ops/s and
# the ratio ddp/torch (goal >= 3x).
# Usage: scripts/bench/tcpstore_vs_torch.sh [--ops TOTAL_PER_CELL] [--clients 1,4,16] [--repeat N]
# Env: BUILD_DIR (default build), PYTHON (default /usr/bin/python3, where python3-torch lives).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
total_ops=40000
clients_list=1,4,16
repeat=3
declare -A bench_flags=([--ops]=total_ops [--clients]=clients_list [--repeat]=repeat)
parse_flags 2,11 "$@"
require_bins ddp-rendezvousd ddp-bench
require_torch
start_store_servers

echo "# $(nproc) cores, load average at start: $(load_average)"
echo "# torch $("$python" -c 'import torch; print(torch.__version__)'); $total_ops ops per cell split over the clients; median of $repeat"
IFS=, read -r -a counts <<<"$clients_list"
rows=()
for op in get set add; do
  for c in "${counts[@]}"; do
    per=$(( (total_ops + c - 1) / c ))
    : >"$tmp/ddp.runs"; : >"$tmp/torch.runs"
    for ((r = 0; r < repeat; r++)); do
      order=(torch ddp); (( r % 2 )) && order=(ddp torch)
      for s in "${order[@]}"; do
        line="$("$build/bin/ddp-bench" store --protocol tcpstore --op "$op" --clients "$c" --ops "$per" \
          --endpoint "${server_endpoint[$s]}")"
        echo "$s $line"
        echo "$line" >>"$tmp/$s.runs"
      done
    done
    t=$(field ops_per_s <"$tmp/torch.runs" | median)
    d=$(field ops_per_s <"$tmp/ddp.runs" | median)
    tl="$(field p50_us <"$tmp/torch.runs" | median) / $(field p99_us <"$tmp/torch.runs" | median)"
    dl="$(field p50_us <"$tmp/ddp.runs" | median) / $(field p99_us <"$tmp/ddp.runs" | median)"
    rows+=("$(awk -v op="$op" -v c="$c" -v t="$t" -v d="$d" -v tl="$tl" -v dl="$dl" \
      'BEGIN { printf "| %s | %d | %.0f | %.0f | **%.1fx** | %s | %s |", op, c, t, d, d / t, tl, dl }')")
  done
done
echo "# load average at end: $(load_average)"
echo
echo "| op | clients | torch ops/s | ddp ops/s | ddp/torch | torch p50/p99 µs | ddp p50/p99 µs |"
echo "|---|---:|---:|---:|---:|---|---|"
printf '%s\n' "${rows[@]}"
