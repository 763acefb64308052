#!/usr/bin/env bash
# The GPU checklist in one run, on a machine with one NVIDIA GPU, CUDA, NCCL
# and torch 2.x in python3 (no compiler or Debian libraries needed): first
# scripts/gpu/bundle.sh on the build machine, then, with .gpu/ beside the
# checkout, `scripts/gpu/checklist.sh` there. Logs go to $OUT (default
# /tmp/gpu-checklist): env.txt, nccl.txt (the `gpu` tests), bench.txt (SDK vs
# raw NCCL all-reduce), torch.txt (DDP with nccl under ddprun, torchrun and
# --preload torch), nccl-hang.txt (a hung rank named from the Flight
# Recorder), placement.txt (--numa_binding), torch-suite.txt (the
# torch integration tests against this machine's torch), summary.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/gpu-checklist}
mkdir -p "$out"
B=$root/.gpu/bin
export PYTHONUNBUFFERED=1
export HWLOC_PLUGINS_PATH=$root/.gpu/lib/hwloc
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
stamp() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }

# --- environment: the device, driver, CUDA, NCCL and torch this run used
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[[ -f $nccl_dir/libnccl.so.2 ]] || nccl_dir=$(dirname "$(find /usr /opt -name 'libnccl.so.2*' 2>/dev/null | head -1)")
{
  nvidia-smi
  nvidia-smi topo -m
  grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release
  uname -r
  # shellcheck disable=SC2012  # counting sysfs entries, whose names are plain
  echo "cpus: $(nproc); numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l)"
  for n in /sys/devices/system/node/node*; do echo "$n cpus $(cat "$n/cpulist")"; done
  for d in /sys/bus/pci/devices/*; do
    [[ $(cat "$d/vendor") == 0x10de ]] || continue
    echo "gpu $d class $(cat "$d/class") numa_node $(cat "$d/numa_node") local_cpulist $(cat "$d/local_cpulist")"
  done
  python3 -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda,
    "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name(0))'
  # shellcheck disable=SC2012  # a listing for the reader, not parsed
  echo "/proc/driver/nvidia/gpus: $(ls /proc/driver/nvidia/gpus 2>&1 | tr '\n' ' ')"
  echo "libnccl.so.2 used: $nccl_dir"
  ls -la "$nccl_dir" /usr/local/cuda/lib64/libcudart.so* 2>&1
  LD_LIBRARY_PATH=$nccl_dir ldd "$B/ddp_gpu_nccl_test" "$B/ddprun"
} >"$out/env.txt" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); nccl dir: $nccl_dir"

# --- 2. every gpu test (tests/gpu/CMakeLists.txt's scenarios), the health check through NVML first
{
  echo "=== gpu: health checks"
  /sbin/ldconfig -p | grep nvidia-ml
  find / -xdev -name 'libnvidia-ml.so*' 2>/dev/null | head -5
} >>"$out/nccl.txt" 2>&1
t0=$(stamp)
timeout 60 tests/gpu/health_gpu_test.sh "$B/ddprun" >>"$out/nccl.txt" 2>&1
note "gpu test health checks: rc=$? ($(secs "$t0" "$(stamp)") s) $(grep -h 'with the NVML check' "$out/nccl.txt" | tail -1)"
for s in elastic-reform world-of-one init-timeout duplicate-gpu id-never-published scalable-ids reducer abort-on-error; do
  t0=$(stamp)
  echo "=== $s" >>"$out/nccl.txt"
  # info: the re-form's log line splits its time (closing, members, connecting)
  DDP_LOG_LEVEL=$([[ $s == elastic-reform ]] && echo info || echo warn) LD_LIBRARY_PATH=$nccl_dir timeout 60 \
    "$B/ddp_gpu_nccl_test" "$s" >>"$out/nccl.txt" 2>&1
  note "gpu test $s: rc=$? ($(secs "$t0" "$(stamp)") s)"
done
# --nproc_per_node=gpu: one worker per GPU (/proc/driver/nvidia/gpus, else NVML).
"$B/ddprun" --standalone --nproc_per_node=gpu --log_level=info --no_python /bin/true >>"$out/nccl.txt" 2>&1
note "ddprun --nproc_per_node=gpu: rc=$? $(grep -o 'all [0-9]* local workers succeeded' "$out/nccl.txt" | tail -1)"
# The SDK bootstrapped through the agent's store under ddprun, NCCL loaded at run time.
for backend in nccl auto; do
  echo "=== ddprun + SDK backend $backend" >>"$out/nccl.txt"
  DDP_NCCL_LIBRARY=$nccl_dir/libnccl.so.2 timeout 120 "$B/ddprun" --standalone --nproc_per_node=1 --no_python \
    "$B/ddp_sdk_nccl_loading_worker" "$backend" >>"$out/nccl.txt" 2>&1
  note "ddprun + SDK ($backend): rc=$? $(grep -o 'backend=\(nccl\|gloo\)' "$out/nccl.txt" | tail -1)"
done

# --- 4. torch with nccl on the GPU: ddprun, torchrun, ddprun --preload torch
script=tests/gpu/torch_nccl_train.py
run_torch() {
  local name=$1
  shift
  echo "=== $name: $*" >>"$out/torch.txt"
  local t0
  t0=$(stamp)
  timeout 120 "$@" >"$out/torch-$name.log" 2>&1
  local rc=$?
  cat "$out/torch-$name.log" >>"$out/torch.txt"
  note "torch $name: rc=$rc ($(secs "$t0" "$(stamp)") s) $(grep -h 'final\|initialised\|zygote ready\|zygote.py not found' "$out/torch-$name.log" | tr '\n' ' ')"
  rm -f "$out/torch-$name.log"
}
run_torch ddprun "$B/ddprun" --standalone --nproc_per_node=1 "$script"
run_torch torchrun python3 -m torch.distributed.run --standalone --nproc_per_node=1 "$script"
run_torch ddprun-preload "$B/ddprun" --standalone --nproc_per_node=1 --preload torch "$script"

# --- who hung over NCCL (the Flight Recorder names the rank the other waits for; 2 GPUs, else skipped)
timeout 360 tests/gpu/nccl_hang_test.sh "$B/ddprun" >"$out/nccl-hang.txt" 2>&1
note "torch nccl hung rank named: rc=$? (77: skipped) $(tail -1 "$out/nccl-hang.txt")"

# --- 5. numa_binding with a real GPU
for strategy in node socket exclusive; do
  for cvd in unset 0; do
    echo "=== --numa_binding=$strategy CUDA_VISIBLE_DEVICES=$cvd" >>"$out/placement.txt"
    if [[ $cvd == unset ]]; then
      env -u CUDA_VISIBLE_DEVICES timeout 60 "$B/ddprun" --standalone --nproc_per_node=1 \
        --numa_binding="$strategy" tests/gpu/worker_placement.py >>"$out/placement.txt" 2>&1
    else
      CUDA_VISIBLE_DEVICES=$cvd timeout 60 "$B/ddprun" --standalone --nproc_per_node=1 \
        --numa_binding="$strategy" tests/gpu/worker_placement.py >>"$out/placement.txt" 2>&1
    fi
    note "numa_binding=$strategy CUDA_VISIBLE_DEVICES=$cvd: rc=$? $(grep -h 'cpus=' "$out/placement.txt" | tail -1)"
  done
done

# --- 3. overhead: SDK all-reduce vs raw NCCL, 4 KiB .. 1 GiB
LD_LIBRARY_PATH=$nccl_dir timeout 150 "$B/ddp_gpu_nccl_test" bench >"$out/bench.txt" 2>&1
note "bench: rc=$?"
cat "$out/bench.txt" >>"$summary"

# --- the torch integration tests against this machine's torch (compiled-in paths made to resolve)
if [[ ${GPU_CHECKLIST_TORCH_SUITE:-1} == 1 ]]; then
  # The test binary has the build machine's source and binary folders compiled in.
  src=$(cat "$root/.gpu/source_dir")
  if [[ ! -e $src ]]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
  bindir=$(cat "$root/.gpu/bin_dir")
  if [[ ! -e $bindir ]]; then mkdir -p "$(dirname "$bindir")" && ln -s "$B" "$bindir"; fi
  ref=$(mktemp)
  t0=$(stamp)
  DDP_TEST_PYTHON=$(command -v python3) DDP_TORCH_REFERENCE=$ref timeout 60 "$B/ddp_integration_torch" "[reference]" \
    >"$out/torch-suite.txt" 2>&1
  DDP_TEST_PYTHON=$(command -v python3) DDP_TORCH_REFERENCE=$ref timeout "${GPU_CHECKLIST_SUITE_TIMEOUT:-300}" \
    "$B/ddp_integration_torch" --durations yes >>"$out/torch-suite.txt" 2>&1
  rc=$?
  note "torch suite with $(python3 -c 'import torch; print(torch.__version__)'): rc=$rc ($(secs "$t0" "$(stamp)") s) $(grep -E '^(test cases|All tests)' "$out/torch-suite.txt" | tail -1)"
fi
