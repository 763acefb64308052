#!/usr/bin/env bash
# Runs Debian's shellcheck, with the repository's .shellcheckrc, over every
# shell script of the tree: each *.sh, and each file without an extension whose
# first line is a sh or bash shebang (the files git tracks or would track, or
# every file outside build directories and venvs when it is not a git checkout).
# Exit 0 when all pass, 1 with shellcheck's findings when one does not, 77
# (skipped) without shellcheck, unless CI is set (then 1: scripts/setup.sh
# installs it).
#   check_shell.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t candidates < <(git ls-files --cached --others --exclude-standard | sort -u)
else
  mapfile -t candidates < <(find . \( -path './build*' -o -path './.venv*' -o -path './.git' \) -prune \
    -o -type f -print | sed 's|^\./||' | sort)
fi
files=()
for f in "${candidates[@]}"; do
  [[ -f $f ]] || continue  # deleted but not yet committed
  if [[ $f == *.sh ]]; then
    files+=("$f")
  elif [[ ${f##*/} != *.* ]] && head -n1 "$f" | grep -qE '^#!.*[/ ](ba)?sh([[:space:]]|$)'; then
    files+=("$f")
  fi
done

if ! command -v shellcheck >/dev/null 2>&1; then
  echo "check_shell: shellcheck is not installed: run scripts/setup.sh (apt install shellcheck)"
  [[ -n ${CI:-} ]] && exit 1
  echo "SKIP: shellcheck is not installed"
  exit 77
fi
if ! shellcheck --format=gcc "${files[@]}"; then
  echo "check_shell: a shell script has findings: fix them, or disable one where it is intended with" \
    "'# shellcheck disable=SCxxxx  # reason' on the line before"
  exit 1
fi
echo "check_shell: ${#files[@]} shell scripts pass ($(shellcheck --version | sed -n 's/^version: //p'))"
