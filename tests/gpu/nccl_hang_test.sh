#!/bin/bash
# A rank hung while the other waits in an NCCL all-reduce is the one ddprun
# names and kills, from the Flight Recorder's counts (docs/agent-diagnosis.md, "Who hung:
# the culprit rule"): torch_nccl_hang.py under ddprun --section_timeouts.
#   nccl_hang_test.sh DDPRUN
# NCCL puts one rank on each GPU: exits 77 (skipped) with fewer than 2 CUDA
# devices or without torch with CUDA ($DDP_TEST_PYTHON, else python3).
set -u
ddprun=$1
python=${DDP_TEST_PYTHON:-python3}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; cat "$tmp/err"; exit 1; }
n=$("$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null) ||
  skip "$python cannot import torch"
[ "${n:-0}" -ge 2 ] || skip "needs 2 CUDA devices (NCCL puts one rank on each), found ${n:-0}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# NCCL's start-up takes seconds: steps get a generous timeout.
timeout 300 "$ddprun" --standalone --nproc_per_node=2 --section_timeouts step=20 --python "$python" \
  "$(dirname "$0")/torch_nccl_hang.py" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 1 ] || fail "ddprun exited $rc, not 1"
grep -q '^  rank       : 1 (local_rank 1)$' "$tmp/err" || fail "the report does not name rank 1"
grep -q '^  waiting    : rank 0 waits in .* for rank 1$' "$tmp/err" || fail "the report does not say rank 0 waits for rank 1"
grep -q '^  culprit    : rank 0 missed its deadline but waits in .*(Flight Recorder)' "$tmp/err" ||
  fail "the Flight Recorder did not tell that rank 0 waits"
[ "$(grep -c 'worker hung' "$tmp/err")" = 1 ] || fail "not exactly one rank killed as hung"
echo "PASS: rank 1 named from the Flight Recorder; $(grep -o 'killed its process tree ([0-9]* ms after the deadline)' "$tmp/err")"
