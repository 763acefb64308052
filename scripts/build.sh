#!/usr/bin/env bash
# Release build into build/; executables in build/bin/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
cmake --build build --parallel "$(nproc)"
