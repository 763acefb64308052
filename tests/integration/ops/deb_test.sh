#!/bin/bash
# cpack -G DEB from the build dir: package ddprun with the binaries, units and
# SDK, and runtime dependencies from dpkg-shlibdeps.
set -euo pipefail
build=$1 cpack=$2
out=$(mktemp -d "${TMPDIR:-/tmp}/ddp-deb-test.XXXXXX")
trap 'rm -rf "$out"' EXIT
"$cpack" -G DEB -B "$out" --config "$build/CPackConfig.cmake" > "$out/cpack.log" 2>&1 || { cat "$out/cpack.log"; exit 1; }
deb=$(ls "$out"/ddprun_*.deb)
info=$(dpkg-deb -I "$deb")
files=$(dpkg-deb -c "$deb")
grep -q '^ Package: ddprun$' <<<"$info" || { echo "FAIL: package name"; echo "$info"; exit 1; }
grep -q '^ Depends: .*libspdlog' <<<"$info" || { echo "FAIL: no runtime dependencies"; echo "$info"; exit 1; }
for f in bin/ddprun bin/ddp-guard bin/ddp-rendezvousd bin/ddp-store bin/ddp-bench lib/systemd/system/ddp-rendezvousd.service \
         'lib/systemd/system/ddprun@.service' include/ddp/sdk.hpp lib/cmake/ddp/ddpConfig.cmake; do
  grep -q "/$f\$" <<<"$files" || { echo "FAIL: $f missing from $deb"; exit 1; }
done
echo "ok: $(basename "$deb"): $(grep '^ Depends:' <<<"$info")"
