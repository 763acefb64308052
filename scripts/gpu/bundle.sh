#!/usr/bin/env bash
# Packs what scripts/gpu/checklist.sh needs on a GPU machine whose image has
# CUDA, NCCL and PyTorch but none of Debian's -dev libraries: the binaries of
# BUILD_DIR (default build, configured with NCCL found) and every shared
# library they load that is not glibc, libstdc++, the CUDA driver or NCCL (the
# GPU machine's own are used), into .gpu/{bin,lib}. The binaries find the
# libraries by their RUNPATH ($ORIGIN/../lib, set with patchelf), so nothing
# leaks into the workers' LD_LIBRARY_PATH. Usage: scripts/gpu/bundle.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
out=$root/.gpu
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
bins=(ddprun ddp-guard ddp-store ddp-bench ddp-rendezvousd ddp_gpu_nccl_test ddp_integration_torch
      ddp_integration_torch_jobs ddp_sdk_nccl_loading_worker fake_worker)
for b in "${bins[@]}"; do
  [[ -x $build/bin/$b ]] || { echo "bundle.sh: $build/bin/$b is missing; build it first" >&2; exit 1; }
  cp "$build/bin/$b" "$out/bin/"
done
# The plugins ddprun dlopens from ../lib/ddprun (hwloc for --numa_binding).
mkdir -p "$out/lib/ddprun"
cp "$build/lib/ddprun/libddp_numa.so" "$out/lib/ddprun/"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnccl\.so)'
for b in "${bins[@]/#/$build/bin/}" "$out/lib/ddprun/libddp_numa.so"; do ldd "$b" 2>/dev/null || true; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] || cp -L "$path" "$out/lib/$name"
  done
# ddprun's Python helpers (the --preload zygote, the stack hook) beside bin/.
cp -r "$build/share" "$out/share"
# hwloc finds PCI devices (the GPUs, for --numa_binding) through a plugin.
mkdir -p "$out/lib/hwloc"
cp -L /usr/lib/x86_64-linux-gnu/hwloc/hwloc_pci.so "$out/lib/hwloc/"
ldd "$out/lib/hwloc/hwloc_pci.so" | awk '$1 ~ /^libpciaccess/ {print $3}' | xargs -r -I{} cp -L {} "$out/lib/"
strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
for f in "$out"/bin/* "$out"/lib/*.so* "$out"/lib/hwloc/*.so "$out"/lib/ddprun/*.so; do
  patchelf --print-interpreter "$f" >/dev/null 2>&1 || [[ $f == */lib/* ]] || continue  # static: nothing to find
  # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
  patchelf --set-rpath '$ORIGIN/../lib:$ORIGIN:$ORIGIN/..' "$f"  # lib/hwloc/, lib/ddprun/: .. is lib
done
echo "$root" >"$out/source_dir"   # compiled into the test binaries
realpath "$build/bin" >"$out/bin_dir"
grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$root/.git/info/exclude"
du -sh "$out"
