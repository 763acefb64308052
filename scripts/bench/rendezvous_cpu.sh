#!/bin/bash
# The daemon's CPU per agent, two or more ddp-rendezvousd builds side by side
# (docs/performance.md, "Rendezvous at the limit"): for each repetition and each
# binary in turn, a fresh daemon and `ddp-bench rendezvous --agents N --restart
# --daemon-pid PID --floor`; prints every run's figures, then per binary the
# median per agent (first round, restart round and closes) and per request,
# beside the median echo floor of the same runs. DAEMON@BENCH runs that
# daemon with that ddp-bench (a change of the agents' requests; the bench
# sends what DynamicHandler sends), else BUILD_DIR's ddp-bench.
# Usage: BUILD_DIR=build scripts/bench/rendezvous_cpu.sh N REPS DAEMON[@BENCH] [DAEMON[@BENCH] ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD_DIR:-build}/bin
(($# >= 3)) || { echo "usage: $0 N REPS DAEMON [DAEMON ...]" >&2; exit 2; }
n=$1 reps=$2
shift 2
echo "# BUILD_DIR=${BUILD_DIR:-build} scripts/bench/rendezvous_cpu.sh $n $reps $*  ($(date +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for ((r = 1; r <= reps; r++)); do
  for entry in "$@"; do
    daemon=${entry%%@*} bench=$B/ddp-bench
    [[ $entry == *@* ]] && bench=${entry#*@}
    d=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-cpu.XXXXXX")
    "$daemon" --host 127.0.0.1 --port 0 --port-file "$d/p" --log-level warn &
    pid=$!
    while [[ ! -s $d/p ]]; do sleep 0.05; done
    out=$("$bench" rendezvous --endpoint "127.0.0.1:$(cat "$d/p")" --agents "$n" --restart --daemon-pid "$pid" --floor)
    kill "$pid"
    wait "$pid" || true
    rm -rf "$d"
    # daemon CPU: first round F µs/agent, restart round and closes R µs/agent
    # echo floor: W writes/agent of the same sizes, E µs/agent, T s
    # per request: daemon X µs, echo floor Y µs, ratio Z (Q requests/agent)
    line=$(awk '/daemon CPU:/ { f = $5; r = $11 } /echo floor:/ && /writes/ { e = $9 }
                /per request:/ { x = $4; y = $8; z = $11 } END { print f, r, e, x, y, z }' <<<"$out")
    if [[ $(wc -w <<<"$line") -ne 6 ]]; then
      echo "$out" >&2
      echo "rendezvous_cpu.sh: no figures from $bench for $daemon (above)" >&2
      exit 1
    fi
    echo "$entry $line" >>"$rows"
    read -r f rr e x y z <<<"$line"
    echo "#   run $r $entry: first $f µs/agent, restart $rr µs/agent, echo floor $e µs/agent; per request $x µs, floor $y µs, ratio $z"
  done
done
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '# %-40s %9s %9s %9s %11s %11s %11s %7s\n' daemon first_us restart_us all_us floor_us req_us floor_req_us ratio
for daemon in "$@"; do
  col() { awk -v d="$daemon" -v c="$1" '$1 == d { print $c }' "$rows" | median; }
  all=$(awk -v d="$daemon" '$1 == d { print $2 + $3 }' "$rows" | median)
  printf '# %-40s %9.1f %9.1f %9.1f %11.1f %11.2f %11.2f %7.2f\n' "$daemon" "$(col 2)" "$(col 3)" "$all" "$(col 4)" "$(col 5)" "$(col 6)" "$(col 7)"
done
