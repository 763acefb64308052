#!/bin/bash
# ddprun's GPU health check through NVML on a real device (docs/agent-recovery.md,
# "Health checks"): a node with the GPUs it needs joins; one asked for more
# GPUs than it has is kept out and gives up with exit 5. Exit 77 (skipped)
# without a GPU or without libnvidia-ml.so.1.
set -u
ddprun=$1
have_nvml() {
  /sbin/ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1' && return 0
  local d IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do [ -e "$d/libnvidia-ml.so.1" ] && return 0; done
  return 1
}
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 || ! have_nvml; then
  echo "SKIP: no NVIDIA GPU or no libnvidia-ml.so.1 here"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset CUDA_VISIBLE_DEVICES PET_NPROC_PER_NODE PET_NNODES
export DDP_SLURM=0

start=$(date +%s%N)
"$ddprun" --standalone --nproc_per_node=1 --health_gpus=1 --log_level=info --no_python /bin/true 2>"$dir/ok.err"
rc=$?
end=$(date +%s%N)
echo "ddprun with the NVML check: rc=$rc, $(((end - start) / 1000000)) ms in all"
if [ $rc -ne 0 ]; then
  cat "$dir/ok.err"
  echo "FAIL: --health_gpus=1 on a GPU node exited $rc"
  exit 1
fi
if grep -q "no GPU check" "$dir/ok.err"; then
  cat "$dir/ok.err"
  echo "FAIL: NVML did not load on a GPU node"
  exit 1
fi

"$ddprun" --standalone --health_gpus=4096 --health_retries=0 --no_python /bin/true 2>"$dir/bad.err"
rc=$?
if [ $rc -ne 5 ] || ! grep -q "node unhealthy (gpus check): .* GPU(s) visible, fewer than --health_gpus=4096" "$dir/bad.err"; then
  cat "$dir/bad.err"
  echo "FAIL: --health_gpus=4096 exited $rc without the gpus line"
  exit 1
fi

# A GPU index past the devices ends CUDA_VISIBLE_DEVICES' list, as in CUDA.
CUDA_VISIBLE_DEVICES=0,4095 "$ddprun" --standalone --health_gpus=2 --health_retries=0 --no_python /bin/true \
  2>"$dir/cvd.err"
rc=$?
if [ $rc -ne 5 ] || ! grep -q "1 GPU(s) visible (CUDA_VISIBLE_DEVICES=0,4095), fewer than --health_gpus=2" "$dir/cvd.err"; then
  cat "$dir/cvd.err"
  echo "FAIL: CUDA_VISIBLE_DEVICES=0,4095 with --health_gpus=2 exited $rc without the gpus line"
  exit 1
fi

# More workers than GPUs (gloo on a GPU node) joins under the default, as under torchrun.
CUDA_VISIBLE_DEVICES=0 "$ddprun" --standalone --nproc_per_node=2 --health_retries=0 --log_level=info --no_python \
  /bin/true 2>"$dir/share.err"
rc=$?
if [ $rc -ne 0 ] || ! grep -q "1 GPU(s) visible (CUDA_VISIBLE_DEVICES=0) for --nproc_per_node=2" "$dir/share.err"; then
  cat "$dir/share.err"
  echo "FAIL: two workers on one GPU exited $rc without the note"
  exit 1
fi
echo "PASS"
