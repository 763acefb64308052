// The GPUs NVML sees, for the launcher's --nproc_per_node=gpu|auto where the
// driver's /proc entries are missing (WSL2, sandboxes that pass GPUs through).
#pragma once

#include <optional>
#include <string>

namespace ddp::agent {

// CUDA_VISIBLE_DEVICES' entries (indices or UUIDs; the list ends at the first
// that names no device, as in CUDA) when set, else every device; nullopt where
// libnvidia-ml.so.1 cannot be loaded or a device does not answer. Loads NVML
// (a failed dlopen costs about 0.1 ms).
std::optional<int> nvml_gpu_count(const std::optional<std::string>& cuda_visible_devices);

}  // namespace ddp::agent
