#!/usr/bin/env bash
# Which entry point installs torch 2.x (~5.5 GB from PyPI): scripts/test.sh
# (the torch2 tests and the peer benchmarks need it) asks scripts/setup.sh for
# it with --torch2; scripts/demo.sh and the pip path (scripts/setup.sh alone,
# README) do not. Each script runs from a copy of the tree whose setup.sh is
# the real one (with the packages, wheel tools and ruff of this machine present) or
# a stand-in that records how it was called, so nothing is downloaded.
# Usage: setup_paths_test.sh SOURCE_DIR. Exit 77 (skipped) without .venv-wheel or .venv-lint.
set -euo pipefail
src="$1"
[[ -x $src/.venv-wheel/bin/auditwheel ]] || { echo "SKIP: no wheel tools in $src/.venv-wheel (run scripts/setup.sh)"; exit 77; }
[[ -x $src/.venv-lint/bin/ruff ]] || { echo "SKIP: no ruff in $src/.venv-lint (run scripts/setup.sh)"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $1"; exit 1; }

# A tree with the scripts and a stand-in setup.sh that records its arguments and
# stops the caller (exit 42), so neither the build nor the tests run.
stub_tree() {
  local t="$1"
  mkdir -p "$t/scripts"
  cp "$src/scripts/demo.sh" "$src/scripts/test.sh" "$t/scripts/"
  printf '#!/bin/sh\necho "$@" > "%s/setup.args"\nexit 42\n' "$t" >"$t/scripts/setup.sh"
  chmod +x "$t/scripts/setup.sh"
}
stub_tree "$tmp/demo"
rc=0; "$tmp/demo/scripts/demo.sh" >/dev/null 2>&1 </dev/null || rc=$?
[[ $rc == 42 && -f $tmp/demo/setup.args ]] || fail "scripts/demo.sh did not run scripts/setup.sh first (exit $rc)"
[[ "$(cat "$tmp/demo/setup.args")" != *--torch2* ]] || fail "scripts/demo.sh asks setup.sh for torch 2.x: $(cat "$tmp/demo/setup.args")"
stub_tree "$tmp/ci"
rc=0; "$tmp/ci/scripts/test.sh" >/dev/null 2>&1 </dev/null || rc=$?
[[ $rc == 42 ]] || fail "scripts/test.sh did not run scripts/setup.sh first (exit $rc)"
[[ "$(cat "$tmp/ci/setup.args")" == *--torch2* ]] || fail "scripts/test.sh does not ask setup.sh for torch 2.x (CI needs it): $(cat "$tmp/ci/setup.args")"

# The real setup.sh without --torch2 (the pip path): packages and wheel tools
# and ruff present here, so it only checks them, and it makes no .venv.
mkdir -p "$tmp/pip/scripts"
cp "$src/scripts/setup.sh" "$src"/scripts/requirements-*.txt "$tmp/pip/scripts/"
ln -s "$(cd "$src/.venv-wheel" && pwd -P)" "$tmp/pip/.venv-wheel"
ln -s "$(cd "$src/.venv-lint" && pwd -P)" "$tmp/pip/.venv-lint"
out="$("$tmp/pip/scripts/setup.sh" 2>&1)" || fail "scripts/setup.sh exited $?: $out"
[[ ! -e $tmp/pip/.venv ]] || fail "scripts/setup.sh made .venv without --torch2: $out"
[[ "$out" != *torch* ]] || fail "scripts/setup.sh without --torch2 speaks of torch: $out"
bad="$("$tmp/pip/scripts/setup.sh" --torch 2>&1)" && fail "setup.sh --torch (a typo) was accepted"
[[ "$bad" == *"unknown argument '--torch'"* ]] || fail "setup.sh --torch: $bad"
echo "demo: setup.sh without --torch2; test.sh: with it; setup.sh alone made no .venv"
