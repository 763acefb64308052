#!/usr/bin/env bash
# Worker bootstrap at scale: N simulated torch ranks do what init_process_group
# does with the job's store (connect, the rank-0 set and everyone's get of the
# NCCL id, the store-based barrier; `ddp-bench bootstrap`), against PyTorch's
# own TCPStore server (torch_tcpstore_server.py in Debian's /usr/bin/python3)
# and against `ddp-rendezvousd --port 0`, in one run. Each N runs --repeat
# times, alternating which server goes first; the table shows the median time
# until the last rank passed the barrier and the ratio torch/ddp (goal >= 10x
# at the largest N), and the CPU seconds each server spent on it (the clients
# share this machine's cores with the server; on a cluster they would not). torch 1.13's server speaks the 1.x wire protocol, so both
# are driven with it; a last column times ddp with torch 2.x's (VALIDATE, PING). With a torch 2.x PYTHON (e.g. the
# .venv of scripts/setup.sh) the server is torch's libuv one and both are driven with the 2.x protocol.
# The servers and the clients each hold one descriptor per rank: the script
# raises `ulimit -n` as far as it may (root: --fd-limit) and skips an N that
# does not fit.
# A run that is not through after --timeout seconds counts as failed (torch
# 1.13's server has dropped connections at 19,500 ranks here, and the barrier
# then never completes).
# Usage: scripts/bench/bootstrap_vs_torch.sh [--ranks 100,1000,4000,16000] [--repeat N] [--fd-limit N] [--timeout S]
# Env: BUILD_DIR (default build), PYTHON (default /usr/bin/python3, where python3-torch lives; .venv/bin/python: torch 2.x).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
ranks_list=100,1000,4000,16000
repeat=3
fd_limit=65536
timeout=300
declare -A bench_flags=([--ranks]=ranks_list [--repeat]=repeat [--fd-limit]=fd_limit [--timeout]=timeout)
parse_flags 2,19 "$@"
require_bins ddp-rendezvousd ddp-bench
require_torch

# Raising the hard limit needs root; otherwise the soft limit goes up to it.
ulimit -n "$fd_limit" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
limit=$(ulimit -n)

start_store_servers

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
dialect=()
[[ $torch_version == 1.* ]] || dialect=(--dialect 2)  # torch 2.x's server speaks only the 2.x protocol
echo "# $(nproc) cores, open-file limit $limit, load average at start: $(load_average)"
echo "# torch $torch_version (protocol ${dialect[1]:-1}.x); median of $repeat; times in seconds"
IFS=, read -r -a counts <<<"$ranks_list"
rows=()
for n in "${counts[@]}"; do
  if ((n + 256 > limit)); then
    echo "# $n ranks skipped: needs $((n + 256)) open files per process, the limit is $limit"
    continue
  fi
  : >"$tmp/ddp.runs"; : >"$tmp/torch.runs"; : >"$tmp/ddp2.runs"
  for ((r = 0; r < repeat; r++)); do
    order=(torch ddp); ((r % 2)) && order=(ddp torch)
    for s in "${order[@]}"; do
      line="$("$build/bin/ddp-bench" bootstrap --ranks "$n" --endpoint "${server_endpoint[$s]}" --label "$s" --timeout "$timeout" \
        --server-pid "${server_pid[$s]}" "${dialect[@]}")"
      echo "$line"
      echo "$line" >>"$tmp/$s.runs"
    done
    if ((${#dialect[@]} == 0)); then  # with torch 2.x the runs above already use its protocol
      line="$("$build/bin/ddp-bench" bootstrap --ranks "$n" --endpoint "${server_endpoint[ddp]}" --label ddp --dialect 2 \
        --server-pid "${server_pid[ddp]}")"
      echo "$line"
      echo "$line" >>"$tmp/ddp2.runs"
    fi
  done
  ok() { { grep -v FAILED "$tmp/$1.runs" || true; } | field "$2" | median; }  # an empty file: nan
  failed=$(grep -c FAILED "$tmp/torch.runs" || true)
  d2=$(ok ddp2 total_s)
  ((${#dialect[@]} == 0)) || d2=same  # torch 2.x: the ddp column is already its protocol
  rows+=("$(awk -v n="$n" -v t="$(ok torch total_s)" -v d="$(ok ddp total_s)" -v d2="$d2" \
    -v tc="$(ok torch connect_s)" -v dc="$(ok ddp connect_s)" -v tu="$(ok torch server_cpu_s)" \
    -v du="$(ok ddp server_cpu_s)" -v failed="$failed" -v reps="$repeat" '
    function cell(v) { return v == "same" ? "(as ddp)" : v == "nan" ? "failed" : sprintf("%.3f", v) }
    function ratio(a, b) { return (a == "nan" || b == "nan" || b + 0 == 0) ? "n/a" : sprintf("**%.1fx**", a / b) }
    BEGIN {
      note = failed > 0 ? sprintf(" (%d of %d torch runs failed)", failed, reps) : ""
      printf "| %d%s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", n, note, cell(tc), cell(t), cell(dc),
        cell(d), ratio(t, d), cell(tu), cell(du), ratio(tu, du), cell(d2)
    }')")
done
echo "# load average at end: $(load_average)"
echo
echo "| ranks | torch: all connected | torch: all past the barrier | ddp: all connected | ddp: all past the barrier | torch/ddp | torch server CPU s | ddp server CPU s | torch/ddp CPU | ddp, torch 2.x protocol: all past the barrier |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
