#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test but the gpu ones.
# Exit status is ctest's: non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
# --timeout guards tests that forgot their own TIMEOUT property.
ctest --output-on-failure --label-exclude gpu --parallel "$(nproc)" --timeout 300 "$@"
