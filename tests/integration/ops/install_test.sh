#!/bin/bash
# cmake --install into a staging prefix, then build an out-of-tree consumer
# with find_package(ddp) against it and run it under the installed ddprun.
set -euo pipefail
build=$1 consumer=$2 cmake=$3
stage=$(mktemp -d "${TMPDIR:-/tmp}/ddp-install-test.XXXXXX")
trap 'rm -rf "$stage"' EXIT
prefix=$stage/usr

"$cmake" --install "$build" --prefix "$prefix" > "$stage/install.log" || { cat "$stage/install.log"; exit 1; }
for f in bin/ddprun bin/ddp-guard bin/ddp-rendezvousd bin/ddp-store bin/ddp-bench \
         lib/systemd/system/ddp-rendezvousd.service "lib/systemd/system/ddprun@.service" \
         include/ddp/sdk.hpp lib/cmake/ddp/ddpConfig.cmake; do
  if [ ! -e "$prefix/$f" ]; then
    echo "FAIL: cmake --install did not install $f"
    exit 1
  fi
done
grep -q '^Type=notify' "$prefix/lib/systemd/system/ddp-rendezvousd.service"

# The consumer must find ddp in the stage only, never in the source or build tree.
"$cmake" -S "$consumer" -B "$stage/consumer-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$stage/configure.log" 2>&1 \
  || { cat "$stage/configure.log"; exit 1; }
"$cmake" --build "$stage/consumer-build" > "$stage/build.log" 2>&1 || { cat "$stage/build.log"; exit 1; }
# The SDK loads NCCL and the CUDA runtime at run time (NCCL groups only): the
# consumer must not be linked against them, whatever the SDK was built with.
if ldd "$stage/consumer-build/ddp_consumer" | grep -E 'libnccl|libcudart'; then
  echo "FAIL: the find_package(ddp) consumer links NCCL or the CUDA runtime"
  exit 1
fi

cd "$stage"
out=$("$prefix/bin/ddprun" --standalone --nnodes=1 --nproc_per_node=2 \
      "$stage/consumer-build/ddp_consumer" 2>&1) || { rc=$?; echo "$out"; echo "FAIL: ddprun exited $rc"; exit 1; }
echo "$out"
for r in 0 1; do
  if ! grep -q "consumer rank=$r world_size=2 sum=3" <<<"$out"; then
    echo "FAIL: rank $r did not report the all-reduce result"
    exit 1
  fi
done
echo "ok: installed ddprun ran the find_package(ddp) consumer on 2 ranks"
