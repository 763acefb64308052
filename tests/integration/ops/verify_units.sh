#!/bin/sh
# systemd-analyze verify on both units (copies generated for this build, so
# ExecStart names binaries that exist). Any diagnostic about our units fails.
set -u
dir=$1
if ! command -v systemd-analyze >/dev/null 2>&1; then
  if [ "${CI:-}" = true ]; then
    echo "systemd-analyze is not installed; CI=true requires it (apt-get install systemd)"
    exit 1
  fi
  echo "SKIP: systemd-analyze is not installed (apt-get install systemd)"
  exit 77
fi
out=$(systemd-analyze verify "$dir/ddp-rendezvousd.service" "$dir/ddprun@.service" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "FAIL: systemd-analyze verify exited $rc"
  exit 1
fi
if printf '%s\n' "$out" | grep -E 'ddp-rendezvousd|ddprun@' >/dev/null; then
  echo "FAIL: systemd-analyze verify has diagnostics for the units above"
  exit 1
fi
echo "ok: both units verified"
