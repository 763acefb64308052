#!/usr/bin/env bash
# clang-format --dry-run --Werror, with the repository's .clang-format, over the
# sources listed in scripts/lint/formatted-files.txt (the tree is formatted file
# by file; a listed file must stay formatted). Exit 0 when they all are, 1 with
# clang-format's diagnostics when one is not, 77 (skipped) without clang-format.
#   check_format.sh [SOURCE_DIR]             check the listed files
#   check_format.sh --unlisted [SOURCE_DIR]  print the sources not listed yet
set -euo pipefail
unlisted=0
if [[ ${1:-} == --unlisted ]]; then unlisted=1; shift; fi
cd "${1:-$(dirname "$0")/../..}"
list=scripts/lint/formatted-files.txt
mapfile -t files < <(grep -v '^#' "$list" | grep .)

if ((unlisted)); then
  git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' | sort | comm -23 - <(printf '%s\n' "${files[@]}" | sort)
  exit 0
fi

# The list was made with clang-format 14 (Debian bookworm's); other versions
# format some constructs differently.
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
done
if [[ -z $cf ]]; then
  echo "SKIP: clang-format is not installed (apt install clang-format)"
  exit 77
fi

missing=0
for f in "${files[@]}"; do
  if [[ ! -f $f ]]; then
    echo "$list: $f does not exist: remove it from the list"
    missing=1
  fi
done
((missing == 0)) || exit 1

if ! "$cf" --dry-run --Werror --style=file "${files[@]}"; then
  echo "check_format: a listed file is not formatted: run $cf -i on it (style: .clang-format)"
  exit 1
fi
echo "check_format: ${#files[@]} listed files formatted ($cf)"
