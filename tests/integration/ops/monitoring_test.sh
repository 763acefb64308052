#!/usr/bin/env bash
# The alert rules and the Grafana dashboard in scripts/monitoring/: promtool
# checks the rules and runs their unit tests, then a real daemon holding a job
# that shows every per-job series is scraped, and every ddp_* series the
# dashboard and the rules use must be among what it exports.
# Usage: monitoring_test.sh SOURCE_DIR BIN_DIR. Exit 77 (skipped) without
# promtool, except under CI=true, where that fails.
set -euo pipefail
src="$1"
bin="$2"
mon="$src/scripts/monitoring"
if ! command -v promtool >/dev/null; then
  if [[ "${CI:-}" == "true" ]]; then echo "FAIL: promtool is not installed (scripts/setup.sh installs prometheus)"; exit 1; fi
  echo "SKIP: promtool is not installed (scripts/setup.sh installs prometheus)"
  exit 77
fi
promtool check rules "$mon/ddp-rendezvousd.rules.yml"
(cd "$mon" && promtool test rules ddp-rendezvousd.rules.test.yml)

tmp="$(mktemp -d)"
daemon=""
trap '[[ -n "$daemon" ]] && kill -TERM "$daemon" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$tmp/port" --metrics-port 0 \
  --metrics-port-file "$tmp/mport" --log-level warn &
daemon=$!
for _ in $(seq 1 100); do [[ -s "$tmp/mport" ]] && break; sleep 0.1; done
[[ -s "$tmp/mport" ]] || { echo "FAIL: the daemon wrote no metrics port"; exit 1; }
store() { "$bin/ddp-store" --endpoint "127.0.0.1:$(cat "$tmp/port")" "$@" >/dev/null; }
# A job in round 1 with every kind of key the per-job series come from.
now="$(date +%s)"
store set /j/rdzv/nnodes 2:4
store set /j/rdzv/round 1
store set /j/rdzv/round_1/closed "2 4 9"
store set /j/rdzv/round_1/spare/s1 '{"id":"s1","host":"h3","nproc":2}'
store set /j/rdzv/excluded/h9 "2 worker failures"
store set /j/agent/status/n1 '{"node":"n1","host":"h1","state":"running","round":1,"group_rank":0,"restart_count":1,"max_restarts":3,"updated":'"$now"',"workers":[{"rank":0,"state":"running","step_s":0.2,"heartbeat_age_s":0.4}]}'
store set /j/agent/failure/n1 '{"summary":"rank 1 on h1: exit code 1","time":'"$now"'}'
store set /j/agent/stragglers '{"round":1,"stragglers":[{"rank":1}]}'
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "http://127.0.0.1:$(cat "$tmp/mport")/metrics" >"$tmp/metrics.txt"
python3 "$src/tests/integration/ops/check_monitoring_names.py" "$tmp/metrics.txt" \
  "$mon/ddp-rendezvousd.dashboard.json" "$mon/ddp-rendezvousd.rules.yml"
