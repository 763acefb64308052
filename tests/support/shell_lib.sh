# shellcheck shell=bash
# Helpers the shell tests share; sourced (. tests/support/shell_lib.sh), bash.

# A TCP port nobody listens on, below the ephemeral range and below the ports
# ddprun derives for Slurm jobs (20000+).
free_port() {
  local p
  while :; do
    p=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % 9000))
    if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then
      echo "$p"
      return
    fi
  done
}

# Polls a condition (evaluated) for up to $1 tenths of a second.
wait_for() {
  local n=$1
  shift
  while [ "$n" -gt 0 ]; do
    # shellcheck disable=SC2294  # the condition is one shell string, evaluated as written
    if eval "$@"; then return 0; fi
    sleep 0.1
    n=$((n - 1))
  done
  return 1
}
