#!/usr/bin/env bash
# Real ddprun jobs one after another against one ddp-rendezvousd, which
# reclaims each once it is finished: does the daemon's memory level off?
# The figures of docs/reliability.md, "Memory and hostile clients".
#
#   scripts/bench/daemon_job_soak.sh [JOBS] [EVERY] [RECLAIM_MS]
#
# JOBS (default 10000) runs of `ddprun --nnodes=1 --nproc_per_node=1
# --rdzv_backend=c10d --rdzv_endpoint=DAEMON --rdzv_id=soakN --no_python
# /bin/true`; after every EVERY (default 500) jobs it waits for the daemon to
# reclaim them (its `keys` stat back to 0, `--reclaim-idle-jobs-ms`
# RECLAIM_MS, default 500) and prints the daemon's VmRSS, its watch history's
# bytes and the reclaimed counters. Asserts nothing; a failed job is counted.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
jobs=${1:-10000}
every=${2:-500}
reclaim_ms=${3:-500}
for n in "$jobs" "$every" "$reclaim_ms"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "JOBS, EVERY and RECLAIM_MS must be positive integers, not '$n'"
done
require_bins ddprun ddp-rendezvousd ddp-store
work=$(mktemp -d)
"$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$work/port" --metrics-port 0 \
  --metrics-port-file "$work/mport" --reclaim-idle-jobs-ms "$reclaim_ms" --log-level warn 2>"$work/daemon.err" &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [[ -s "$work/port" && -s "$work/mport" ]] && break; sleep 0.1; done
[[ -s "$work/port" ]] || { echo "$bench_name: the daemon did not start: $(cat "$work/daemon.err")" >&2; exit 1; }
endpoint="127.0.0.1:$(cat "$work/port")"
stat() {  # name: the daemon's stat
  "$build/bin/ddp-store" --endpoint "$endpoint" stat | awk -v k="$1" '$1 == k { print $2 }'
}
metric() {  # name: a /metrics gauge
  "$python" - "$(cat "$work/mport")" "$1" <<'EOF'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
print(next((l.split()[1] for l in body.splitlines() if l.startswith(sys.argv[2] + " ")), "-"))
EOF
}
echo "daemon_job_soak: jobs=$jobs every=$every reclaim_ms=$reclaim_ms daemon=$endpoint pid=$daemon"
printf '%8s %10s %14s %14s %14s %8s %7s\n' jobs rss_kib history_bytes reclaimed_jobs reclaimed_keys keys failed
failed=0 start=$SECONDS
for ((i = 1; i <= jobs; i++)); do
  "$build/bin/ddprun" --nnodes=1 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$endpoint" \
    --rdzv_id="soak$i" --no_python /bin/true >/dev/null 2>"$work/job.err" || {
    ((failed++)) || true
    echo "job $i: $(tail -n 1 "$work/job.err")" >&2
  }
  if ((i % every == 0 || i == jobs)); then
    for _ in $(seq 200); do [[ "$(stat keys)" == 0 ]] && break; sleep 0.05; done
    printf '%8d %10s %14s %14s %14s %8s %7d\n' "$i" "$(awk '/^VmRSS/ { print $2 }' "/proc/$daemon/status")" \
      "$(metric ddp_store_history_bytes)" "$(stat reclaimed_jobs)" "$(stat reclaimed_keys)" "$(stat keys)" "$failed"
  fi
done
echo "daemon_job_soak: $jobs jobs in $((SECONDS - start)) s, $failed failed"
