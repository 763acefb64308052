#!/usr/bin/env bash
# Runs ruff (pinned in scripts/requirements-lint.txt, installed by
# scripts/setup.sh into .venv-lint) with the repository's ruff.toml over every
# Python file of the tree: python/, scripts/, the tests' workers and the
# agent's helpers. Exit 0 when all pass, 1 with ruff's findings when one does
# not, 77 (skipped) without .venv-lint, unless CI is set (then 1).
#   check_python.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

ruff=.venv-lint/bin/ruff
if [[ ! -x $ruff ]]; then
  echo "check_python: $PWD/$ruff is missing: run scripts/setup.sh"
  [[ -n ${CI:-} ]] && exit 1
  echo "SKIP: ruff is not installed"
  exit 77
fi
if ! "$ruff" check --config ruff.toml --no-cache --quiet .; then
  "$ruff" check --config ruff.toml --no-cache --statistics . || true
  echo "check_python: a Python file has findings: fix them (.venv-lint/bin/ruff check --fix for the" \
    "fixable ones), or add '# noqa: RULE  # reason' where one is intended"
  exit 1
fi
echo "check_python: every Python file passes ($("$ruff" --version), ruff.toml)"
