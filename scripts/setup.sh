#!/usr/bin/env bash
# Installs the build dependencies (Debian packages, the wheel's pinned build
# tools into .venv-wheel, the lint tests' pinned ruff into .venv-lint) and,
# with --torch2, torch 2.x from PyPI into .venv in the checkout (git ignores
# all three; the torch2-labelled tests and the peer
# benchmarks use .venv). scripts/test.sh passes --torch2; the demo and the pip
# path do not: torch 2.x is about 5.5 GB that neither needs. Idempotent and
# quick when everything is already installed. Uses sudo when not root.
# DDP_SKIP_TORCH2=1 skips the venv even with --torch2 (the torch2 tests then
# skip, and fail under CI).
# Usage: scripts/setup.sh [--torch2]
set -euo pipefail
cd "$(dirname "$0")/.."
torch2=0
for arg in "$@"; do
  case $arg in
    --torch2) torch2=1 ;;
    *) echo "setup.sh: unknown argument '$arg'; usage: scripts/setup.sh [--torch2]" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  ccache   # the wheel build (scripts/build_wheel.sh) and the sanitized ones reuse build/'s objects
  clang libclang-rt-14-dev   # the sanitizer + libFuzzer stage of scripts/test.sh
  clang-format               # the lint test's format check
  shellcheck                 # the lint test of the shell scripts
  libboost1.81-all-dev libcli11-dev libspdlog-dev nlohmann-json3-dev catch2
  libgloo-dev libsystemd-dev libssl-dev
  libhwloc-dev   # --numa_binding (optional: without it the flag is an error)
  python3 python3-torch
  python3-tqdm               # the terminal test draws real progress bars from two ranks
  python3-venv               # .venv with torch 2.x (below)
  etcd-server etcd-client
  iproute2 procps
  elfutils gdb               # stacks of native workers (eu-stack, gdb -batch)
  systemd   # systemd-analyze, for the unit-file tests (systemd need not be PID 1)
  slurmctld slurmd slurm-client munge   # the slurm-labelled tests run a cluster here
  openssh-server openssh-client         # the ssh-labelled tests run sshd on 127.0.0.x
  chromium     # the daemon's status page is tested in a real (headless) browser
  prometheus   # promtool checks the alert rules (scripts/monitoring/)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A venv of Debian's python3 holding what a requirements file pins; rebuilt
# only when the file changed or the tool it must provide is missing.
#   pinned_venv VENV REQUIREMENTS TOOL WHAT
pinned_venv() {
  local venv=$1 requirements=$2 tool=$3 what=$4
  if cmp -s "$requirements" "$venv/requirements.txt" && [[ -x $venv/bin/$tool ]]; then
    echo "setup: $what present in $venv"
    return
  fi
  echo "setup: installing $what into $venv (pinned in $requirements)"
  [[ -x $venv/bin/pip ]] || /usr/bin/python3 -m venv --clear "$venv"
  "$venv/bin/pip" install --disable-pip-version-check --no-input -q -r "$requirements"
  cp "$requirements" "$venv/requirements.txt"
}

# The wheel's build tools (scripts/build_wheel.sh, the wheel-labelled test):
# their own venv, .venv-wheel, so they are there with DDP_SKIP_TORCH2=1 too.
pinned_venv .venv-wheel scripts/requirements-wheel.txt auditwheel "the wheel tools"
# The Python linter of the lint tests (ruff, pinned): its own venv, .venv-lint.
pinned_venv .venv-lint scripts/requirements-lint.txt ruff ruff

# Torch 2.x (--torch2): Debian's python3 (not whatever python3 comes first on
# PATH) in a venv, with the pinned torch and what it pulls in. About 5.5 GB; a
# minute or two from PyPI.
if [[ $torch2 == 0 || ${DDP_SKIP_TORCH2:-0} == 1 ]]; then exit 0; fi
venv=.venv
requirements=scripts/requirements-torch2.txt
want=$(sed -n 's/^torch==//p' "$requirements")
have_torch() {
  "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$want')" 2>/dev/null
}
if have_torch && cmp -s "$requirements" "$venv/requirements.txt"; then
  echo "setup: torch $want present in $venv"
  exit 0
fi
echo "setup: installing torch $want into $venv (pinned in $requirements)"
start=$SECONDS
[[ -x $venv/bin/pip ]] || /usr/bin/python3 -m venv --clear "$venv"
"$venv/bin/pip" install --disable-pip-version-check --no-input -q -r "$requirements"
have_torch || { echo "setup: $venv/bin/python cannot import torch $want after installing it" >&2; exit 1; }
cp "$requirements" "$venv/requirements.txt"
echo "setup: torch $want installed in $((SECONDS - start)) s"
