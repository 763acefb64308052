#!/usr/bin/env bash
# clang-format --dry-run --Werror, with the repository's .clang-format, over
# every C and C++ source of the tree (the files git tracks, or every source
# under the tree outside build directories when it is not a git checkout).
# Exit 0 when they all are formatted, 1 with clang-format's diagnostics when one
# is not, 77 (skipped) without clang-format.
#   check_format.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc')
else
  mapfile -t files < <(find . -path './build*' -prune -o \
    \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cc' \) -print | sort)
fi

# The tree is formatted with clang-format 14 (Debian bookworm's); other
# versions format some constructs differently.
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
done
if [[ -z $cf ]]; then
  echo "SKIP: clang-format is not installed (apt install clang-format)"
  exit 77
fi

if ! "$cf" --dry-run --Werror --style=file "${files[@]}"; then
  echo "check_format: a source is not formatted: run $cf -i --style=file on it (style: .clang-format)"
  exit 1
fi
echo "check_format: ${#files[@]} sources formatted ($cf)"
