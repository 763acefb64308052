#!/usr/bin/env bash
# Release build into build/; executables in build/bin/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# ccache, when there is one (scripts/setup.sh installs it): the wheel's build of
# the same sources (scripts/build_wheel.sh, build-wheel/) then costs little
# (cmake/DdpCcache.cmake sets its base dir in every compile).
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
cmake --build build --parallel "$(nproc)"
