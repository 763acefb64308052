# shellcheck shell=bash
# The common start of the bench drivers in scripts/bench, sourced by each
# (`source "$(dirname "$0")/lib.sh"`) right after its `set -euo pipefail`.
# Sets here (this folder), root (the checkout), build (BUILD_DIR, default
# build), python (PYTHON, default /usr/bin/python3, where python3-torch
# lives) and bench_name (the script's file name, which starts every error
# line). A usage or setup mistake exits 2, a failed run 1.

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
python="${PYTHON:-/usr/bin/python3}"
bench_name="$(basename "$0")"

bench_usage_error() {  # message...
  echo "$bench_name: $*" >&2
  exit 2
}

# Each named executable must be built under $build/bin.
require_bins() {  # name...
  local b
  for b in "$@"; do
    [[ -x "$build/bin/$b" ]] || bench_usage_error "$build/bin/$b not found; run scripts/build.sh (or set BUILD_DIR)"
  done
}

require_torch() {
  "$python" -c 'import torch' 2>/dev/null || bench_usage_error "$python cannot import torch (apt install python3-torch)"
}

# The arguments of the scripts that time torch launchers, `[N]`: $reps (N,
# default 5, a positive integer); ddprun must be built and $python import torch.
launcher_bench_args() {  # "$@"
  reps="${1:-5}"
  [[ "$reps" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "N must be a positive integer, not '$reps'"
  require_bins ddprun
  require_torch
}

# The arguments of the scripts that take `--flag VALUE` pairs: each flag sets
# the variable that the associative array bench_flags maps it to
# (bench_flags=([--ops]=ops)); -h/--help prints lines `help_lines` (first,last)
# of the script, its header comment.
parse_flags() {  # help_lines "$@"
  local help_lines=$1 var
  shift
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h | --help) sed -n "${help_lines}p" "$0"; exit 0 ;;
    esac
    var="${bench_flags[$1]:-}"
    [[ -n "$var" ]] || bench_usage_error "unknown argument '$1'; see --help"
    [[ $# -ge 2 ]] || bench_usage_error "$1 needs a value; see --help"
    printf -v "$var" '%s' "$2"
    shift 2
  done
}

# A scratch folder $tmp, and $pids: background processes killed (and reaped)
# on exit, before the folder goes.
tmp="$(mktemp -d)"
pids=()
bench_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap bench_cleanup EXIT

# Waits (10 s) for a --port-file to be written; else shows the logs in $tmp and fails.
wait_port() {  # file what
  for _ in $(seq 200); do [[ -s "$1" ]] && return 0; sleep 0.05; done
  echo "$bench_name: $2 did not start:" >&2
  cat "$tmp"/*.log >&2
  exit 1
}

# ddp-rendezvousd and PyTorch's own TCPStore server (torch_tcpstore_server.py
# in $python), both on 127.0.0.1 with a free port: server_endpoint[ddp|torch] is
# each one's host:port, server_pid[ddp|torch] its pid.
# shellcheck disable=SC2034  # server_endpoint and server_pid are read by the sourcing script
start_store_servers() {
  declare -gA server_endpoint server_pid
  "$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$tmp/ddp.port" --log-level warn \
    >"$tmp/ddp.log" 2>&1 &
  pids+=($!)
  server_pid[ddp]=$!
  "$python" "$here/torch_tcpstore_server.py" 127.0.0.1 "$tmp/torch.port" >"$tmp/torch.log" 2>&1 &
  pids+=($!)
  server_pid[torch]=$!
  wait_port "$tmp/ddp.port" ddp-rendezvousd
  wait_port "$tmp/torch.port" "torch TCPStore server"
  server_endpoint[ddp]="127.0.0.1:$(cat "$tmp/ddp.port")"
  server_endpoint[torch]="127.0.0.1:$(cat "$tmp/torch.port")"
}

# The median of the numbers on stdin, one a line; "nan" for none.
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# The value of `name=` in each line on stdin.
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
# The 1, 5 and 15 minute load averages.
load_average() { cut -d' ' -f1-3 /proc/loadavg; }
