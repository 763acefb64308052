#!/usr/bin/env bash
# The daemon's status page in a real browser (Debian's chromium, headless):
# two real ddprun jobs on one daemon, "steady" (two nodes running) and
# "crashy" (a node whose workers fail and restart again and again). Loads the
# jobs page, follows the link of the failing job to its page, checks what a
# person reads there (the DOM chromium rendered), follows the other job to its
# nodes, and saves screenshots of both pages into OUT_DIR.
# Usage: status_page_browser_test.sh BIN_DIR OUT_DIR. Exit 77 (skipped) without
# chromium, except under CI=true, where that fails.
set -euo pipefail
bin="$1"
out_dir="$2"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  if [[ "${CI:-}" == "true" ]]; then echo "FAIL: chromium is not installed (scripts/setup.sh installs it)"; exit 1; fi
  echo "SKIP: chromium is not installed (scripts/setup.sh installs it)"
  exit 77
fi
mkdir -p "$out_dir"
tmp="$(mktemp -d)"
pids=()
cleanup() {
  # The agents first (they stop their workers), then the daemon.
  for p in "${pids[@]:1}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:1}"; do
    for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  if [[ ${#pids[@]} -gt 0 ]]; then kill -TERM "${pids[0]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $1"
  for f in "$tmp"/*.log "$tmp"/*.html; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 40 "$f"; }; done
  exit 1
}
wait_for() {  # wait_for SECONDS COMMAND...: polls COMMAND until it succeeds
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

"$bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$tmp/port" --metrics-port 0 \
  --metrics-port-file "$tmp/mport" --log-file "$tmp/daemon.log" &
pids+=($!)
wait_for 20 test -s "$tmp/mport" || fail "the daemon wrote no metrics port"
endpoint="127.0.0.1:$(cat "$tmp/port")"
page="http://127.0.0.1:$(cat "$tmp/mport")"

agent() {  # agent NAME RUN_ID ENV... -- FLAGS...
  local name="$1" run="$2"
  shift 2
  local env=()
  while [[ "$1" != "--" ]]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" "$bin/ddprun" --rdzv_backend=c10d --rdzv_endpoint="$endpoint" --rdzv_id="$run" \
    --log_level=warn --rdzv_conf=join_timeout=60 "$@" --no_python "$bin/fake_worker" \
    >"$tmp/$name.log" 2>&1 </dev/null &
  pids+=($!)
}
agent a steady FAKE_HANG=1 -- --nnodes=2 --nproc_per_node=2
agent b steady FAKE_HANG=1 -- --nnodes=2 --nproc_per_node=2
agent c crashy FAKE_EXIT=3 FAKE_SLEEP_MS=300 "FAKE_ERROR_MESSAGE=loss is nan at step 7" -- \
  --nnodes=1 --nproc_per_node=2 --max_restarts=100000

jobs_ready() {
  "$bin/ddp-store" --endpoint "$endpoint" jobs >"$tmp/jobs.txt" 2>&1 || return 1
  grep -Eq '^steady +c10d +running +2 ' "$tmp/jobs.txt" &&
    grep -Eq '^crashy +c10d +[a-z]+ .* ([2-9]|[1-9][0-9]+)/100000 .*exit code 3' "$tmp/jobs.txt"
}
wait_for 90 jobs_ready || fail "the jobs did not reach running / 2 restarts: $(cat "$tmp/jobs.txt")"

# Headless chromium as root in a container: no sandbox, a profile of its own.
chrome() {
  timeout 90 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --disable-extensions --hide-scrollbars --user-data-dir="$tmp/profile" "$@" 2>>"$tmp/chromium.log"
}
# The text a person reads: the rendered DOM without its tags.
text_of() { sed -e 's/<[^>]*>/ /g' -e 's/&amp;/\&/g' -e 's/&lt;/</g' -e 's/&gt;/>/g' "$1" | tr -s ' \n' ' '; }

chrome --dump-dom "$page/" >"$tmp/jobs.html" || fail "chromium could not load $page/"
jobs_text="$(text_of "$tmp/jobs.html")"
for want in "ddp-rendezvousd" "Jobs" "steady" "crashy" "running" "exit code 3"; do
  [[ "$jobs_text" == *"$want"* ]] || fail "the jobs page does not read '$want'"
done
# Follow the failing job's link as a person clicks it.
link="$(grep -o 'href="/job?id=crashy"' "$tmp/jobs.html" | head -n 1 | sed 's/^href="//; s/"$//')"
[[ -n "$link" ]] || fail "the jobs page has no link to the crashy job"
chrome --dump-dom "$page$link" >"$tmp/crashy.html" || fail "chromium could not load $page$link"
crashy_text="$(text_of "$tmp/crashy.html")"
for want in "job crashy" "restarting\|running" "Failure reports" "loss is nan at step 7" "exit code 3" \
  "Recent events" "job restarted round=" "Nodes (1)"; do
  grep -q -- "$want" <<<"$crashy_text" || fail "the crashy job's page does not read '$want'"
done
# The other job, down to its nodes and ranks.
link="$(grep -o 'href="/job?id=steady"' "$tmp/jobs.html" | head -n 1 | sed 's/^href="//; s/"$//')"
chrome --dump-dom "$page$link" >"$tmp/steady.html" || fail "chromium could not load $page$link"
steady_text="$(text_of "$tmp/steady.html")"
for want in "job steady" "running" "Nodes (2)" "r0 running" "r3 running" "No node has reported a failure"; do
  [[ "$steady_text" == *"$want"* ]] || fail "the steady job's page does not read '$want'"
done
grep -q '<script' "$tmp/jobs.html" "$tmp/crashy.html" "$tmp/steady.html" && fail "a page carries a script"

chrome --window-size=1400,900 --screenshot="$out_dir/status-page-jobs.png" "$page/" >/dev/null ||
  fail "chromium took no screenshot of $page/"
chrome --window-size=1400,1400 --screenshot="$out_dir/status-page-job.png" "$page/job?id=crashy" >/dev/null ||
  fail "chromium took no screenshot of the crashy job"
for png in "$out_dir/status-page-jobs.png" "$out_dir/status-page-job.png"; do
  [[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] || fail "$png is not a PNG"
  (($(stat -c %s "$png") > 10000)) || fail "$png is too small to show a page"
done
echo "status page: jobs list, the failing job and the other job's nodes read as expected; screenshots in $out_dir"
