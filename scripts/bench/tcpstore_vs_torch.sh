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

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
python="${PYTHON:-/usr/bin/python3}"
total_ops=40000
clients_list=1,4,16
repeat=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ops) total_ops="$2"; shift 2 ;;
    --clients) clients_list="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "tcpstore_vs_torch.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
for b in ddp-rendezvousd ddp-bench; do
  if [[ ! -x "$build/bin/$b" ]]; then
    echo "tcpstore_vs_torch.sh: $build/bin/$b not found; run scripts/build.sh (or set BUILD_DIR)" >&2
    exit 2
  fi
done
"$python" -c 'import torch' 2>/dev/null ||
  { echo "tcpstore_vs_torch.sh: $python cannot import torch (apt install python3-torch)" >&2; exit 2; }

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

wait_port() {  # file what
  for _ in $(seq 200); do [[ -s "$1" ]] && return 0; sleep 0.05; done
  echo "tcpstore_vs_torch.sh: $2 did not start:" >&2; cat "$tmp"/*.log >&2; exit 1
}
"$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$tmp/ddp.port" --log-level warn \
  >"$tmp/ddp.log" 2>&1 &
pids+=($!)
"$python" "$here/torch_tcpstore_server.py" 127.0.0.1 "$tmp/torch.port" >"$tmp/torch.log" 2>&1 &
pids+=($!)
wait_port "$tmp/ddp.port" ddp-rendezvousd
wait_port "$tmp/torch.port" "torch TCPStore server"
declare -A endpoint=([ddp]="127.0.0.1:$(cat "$tmp/ddp.port")" [torch]="127.0.0.1:$(cat "$tmp/torch.port")")

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

echo "# $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
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
          --endpoint "${endpoint[$s]}")"
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
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| op | clients | torch ops/s | ddp ops/s | ddp/torch | torch p50/p99 µs | ddp p50/p99 µs |"
echo "|---|---:|---:|---:|---:|---|---|"
printf '%s\n' "${rows[@]}"
