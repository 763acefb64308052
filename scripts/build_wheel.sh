#!/usr/bin/env bash
# Builds the ddprun wheel into build-wheel/dist/ and prints its path on the
# last line. scikit-build-core configures and builds this CMake project (the
# project scripts/build.sh builds, with the options CI uses, DDP_WERROR=ON, and
# DDP_BUILD_TESTS=OFF from pyproject.toml) in build-wheel/, kept between runs; auditwheel then bundles the shared
# libraries not in every Linux (Boost, spdlog, fmt, Gloo, libsystemd, hwloc,
# OpenSSL, libstdc++...) into ddprun.libs/ and tags the wheel with the oldest
# glibc it runs on (manylinux_2_X). The pinned tools come from
# scripts/requirements-wheel.txt in .venv-wheel (scripts/setup.sh installs them).
# Exit status: 0 built; 2 the tools are missing; else the failing step's.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=.venv-wheel
if [[ ! -x $tools/bin/auditwheel ]] || ! cmp -s scripts/requirements-wheel.txt "$tools/requirements.txt"; then
  echo "build_wheel.sh: the wheel tools are missing or not the pinned ones in $tools: run scripts/setup.sh" >&2
  exit 2
fi
out=build-wheel
rm -rf "$out/wheel-raw" "$out/dist"
mkdir -p "$out/wheel-raw" "$out/dist"
# The flags build/ compiles with, so that ccache hands the wheel's build the
# objects build/ already made: its DDP_WERROR (OFF after scripts/demo.sh, ON
# after scripts/test.sh), ON (as CI) without a build/.
werror=ON
if [[ -f build/CMakeCache.txt ]]; then
  werror=$(sed -n 's/^DDP_WERROR:BOOL=//p' build/CMakeCache.txt)
  werror=${werror:-OFF}
fi
export CMAKE_ARGS="${CMAKE_ARGS:-} -DDDP_WERROR=$werror"
# The compiler CMake picks by itself (as for build/), not the one Python was
# built with, which pip would pass on.
export CC=${CC:-cc} CXX=${CXX:-c++}
# ccache, when there is one: build/'s objects serve the wheel's build
# (cmake/DdpCcache.cmake gives every compile the source tree as ccache's base
# dir, and build-wheel/ is at build/'s depth, so the command lines match).
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# No build isolation: the backend is the pinned one in $tools, not a fresh
# download on every build.
"$tools/bin/pip" wheel --disable-pip-version-check --no-input --no-build-isolation --no-deps \
  -w "$out/wheel-raw" . >"$out/pip-wheel.log" 2>&1 || { tail -n 50 "$out/pip-wheel.log" >&2; exit 1; }
raw=("$out"/wheel-raw/ddprun-*.whl)
PATH=$PWD/$tools/bin:$PATH "$tools/bin/auditwheel" repair -w "$out/dist" "${raw[0]}" \
  >"$out/auditwheel.log" 2>&1 || { cat "$out/auditwheel.log" >&2; exit 1; }
wheel=("$out"/dist/ddprun-*.whl)
echo "$PWD/${wheel[0]}"
