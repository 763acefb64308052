#!/bin/bash
# The daemon's cost per agent up to this box's open-file limit
# (docs/performance.md, "Rendezvous at the limit"): for each N, a fresh
# ddp-rendezvousd, then `ddp-bench rendezvous --agents N --restart` (a first
# round, then a restart round), and from /proc the daemon's CPU (user + system)
# and peak RSS over both. Prints one row per N with CPU, memory and bytes per
# agent, then what they project for 100,000 and 1,000,000 agents. Under each
# row, the bench's own figures (--daemon-pid, --floor): the daemon's CPU per
# agent by round, to the nanosecond, and per request beside a bare echo server
# replaying the same writes in the same run.
# Usage: BUILD_DIR=build scripts/bench/rendezvous_scale.sh [N ...]   (default 1000 5000 10000 19500)
# DAEMON=path runs that ddp-rendezvousd binary instead of $BUILD_DIR/bin's (to
# compare two builds with the same bench). LIST_NODES=1: each agent lists every
# node record, as an agent does in a round of at most list_nodes_max nodes (by
# default an agent reads group rank 0's record alone, as past that size).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD_DIR:-build}/bin
sizes=("$@")
((${#sizes[@]})) || sizes=(1000 5000 10000 19500)
tick=$(getconf CLK_TCK)
cpu_ms() {  # utime + stime of pid $1, in ms
  awk -v t="$tick" '{ print ($14 + $15) * 1000 / t }' "/proc/$1/stat"
}
list_flag=()
[[ ${LIST_NODES:-0} == 1 ]] && list_flag=(--list-nodes)
echo "# ${LIST_NODES:+LIST_NODES=$LIST_NODES }${DAEMON:+DAEMON=$DAEMON }BUILD_DIR=${BUILD_DIR:-build} scripts/bench/rendezvous_scale.sh ${sizes[*]}  ($(date +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), open-file limit $(ulimit -Hn))"
printf '%8s %10s %10s %12s %12s %12s %12s %12s\n' agents first_s restart_s cpu_ms cpu_us/agent rss_MB rss_KB/agent bytes/agent
last=""
for n in "${sizes[@]}"; do
  d=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-scale.XXXXXX")
  "${DAEMON:-$B/ddp-rendezvousd}" --host 127.0.0.1 --port 0 --port-file "$d/p" --log-level warn &
  pid=$!
  while [[ ! -s $d/p ]]; do sleep 0.05; done
  rss0=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
  cpu0=$(cpu_ms "$pid")
  out=$("$B/ddp-bench" rendezvous --endpoint "127.0.0.1:$(cat "$d/p")" --agents "$n" --restart --daemon-pid "$pid" --floor "${list_flag[@]}")
  cpu1=$(cpu_ms "$pid")
  hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" || true
  rm -rf "$d"
  row=$(awk -v n="$n" '$1 == n { print }' <<<"$out")
  first=$(awk '{ print $4 }' <<<"$row")  # watching_s: every agent watching the closed round
  bytes=$(awk '{ print $7 }' <<<"$row")
  restart=$(grep -o 'all watching [0-9.]* s' <<<"$out" | awk '{ print $3 }')
  if [[ -z $row ]]; then
    echo "$out" >&2
    echo "rendezvous_scale.sh: ddp-bench printed no row for $n agents (above)" >&2
    exit 1
  fi
  awk -v n="$n" -v f="$first" -v r="$restart" -v c0="$cpu0" -v c1="$cpu1" -v r0="$rss0" -v h="$hwm" -v b="$bytes" \
    'BEGIN { c = c1 - c0; printf "%8d %10.3f %10.3f %12.0f %12.1f %12.1f %12.2f %12d\n", n, f, r, c, c * 1000 / n, h / 1024, (h - r0) / n, b }'
  grep -E 'daemon CPU|echo floor|per request' <<<"$out" | sed 's/^ */#   /'
  last="$n $((${cpu1%.*} - ${cpu0%.*})) $((hwm - rss0)) $bytes"
done
read -r n cpu rss_kb bytes <<<"$last"
echo "# projected from the largest N ($n), linear (the cost per agent was flat from 1,000 up):"
for big in 100000 1000000; do
  awk -v n="$n" -v c="$cpu" -v k="$rss_kb" -v b="$bytes" -v big="$big" \
    'BEGIN { printf "#   %d agents: %.1f s of daemon CPU for a first round and a restart (one event-loop thread), %.0f MB RSS, %.1f GB sent in a first round; LimitNOFILE >= %d\n",
             big, c * big / n / 1000, k * big / n / 1024 + 8, b * big / 1e9, big + 1024 }'
done
