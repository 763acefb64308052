#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages. Idempotent and
# quick when everything is already installed. Uses sudo when not root.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev   # the sanitizer + libFuzzer stage of scripts/test.sh
  clang-format               # the lint test's format check
  libboost1.81-all-dev libcli11-dev libspdlog-dev nlohmann-json3-dev catch2
  libgloo-dev libsystemd-dev libssl-dev
  libhwloc-dev   # --numa_binding (optional: without it the flag is an error)
  python3 python3-torch
  etcd-server etcd-client
  iproute2 procps
  elfutils gdb               # stacks of native workers (eu-stack, gdb -batch)
  systemd   # systemd-analyze, for the unit-file tests (systemd need not be PID 1)
  slurmctld slurmd slurm-client munge   # the slurm-labelled tests run a cluster here
  openssh-server openssh-client         # the ssh-labelled tests run sshd on 127.0.0.x
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
