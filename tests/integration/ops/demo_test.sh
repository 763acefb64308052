#!/usr/bin/env bash
# scripts/demo.sh as a user runs it (its install and build steps skipped:
# DDP_DEMO_SKIP_SETUP=1 on the already built tree): the training ends, and the
# log directory (with each rank's output) and checkpoint it prints are still
# there after it exits.
# Usage: demo_test.sh SOURCE_DIR BINARY_DIR. Exit 77 (skipped) when the build
# tree is not SOURCE_DIR/build, the one the demo runs.
set -euo pipefail
src="$1"
bin="$2"
if [[ "$(cd "$bin" && pwd -P)" != "$(cd "$src/build" 2>/dev/null && pwd -P)" ]]; then
  echo "SKIP: the demo runs $src/build, this build is $bin"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
out="$tmp/out.txt"
TMPDIR="$tmp" DDP_DEMO_SKIP_SETUP=1 "$src/scripts/demo.sh" --epochs 2 >"$out" 2>&1 </dev/null || {
  echo "FAIL: scripts/demo.sh exited $?"; cat "$out"; exit 1
}
last="$(tail -n 1 "$out")"
dir="$(sed -n 's/^demo: kept \(.*\)\/logs and .*/\1/p' <<<"$last")"
fail() { echo "FAIL: $1"; echo "--- demo output:"; cat "$out"; exit 1; }
[[ -n "$dir" ]] || fail "the last line does not say what was kept: $last"
[[ "$last" == *"(exit 0)"* ]] || fail "the last line does not give exit 0: $last"
[[ -d "$dir/logs" ]] || fail "$dir/logs is gone after the demo"
# What it keeps holds something: each of the 4 ranks' output, rank 0's
# training lines included (before: an empty directory).
logs=$(find "$dir/logs" -name stdout.log | wc -l)
[[ $logs == 4 ]] || fail "$dir/logs holds $logs stdout.log files, not one per rank: $(find "$dir/logs")"
grep -q "^epoch 2/2 loss" "$dir"/logs/*/attempt_0/0/stdout.log || fail "rank 0's stdout.log lacks its epochs"
[[ -s "$dir/model.ckpt" ]] || fail "$dir/model.ckpt is gone after the demo"
grep -q "logs in $dir/logs" "$out" || fail "the first line does not name $dir/logs"
echo "demo kept $dir/logs and $dir/model.ckpt"
