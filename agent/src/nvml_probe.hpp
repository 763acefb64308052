// GPUs as NVML sees them, for the health checks. libnvidia-ml.so.1 is opened
// at run time (dlopen), so ddprun has no link-time dependency on the driver
// and runs unchanged on machines without one.
//
// Thread-safety: one thread at a time (the rendezvous thread).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddp::agent {

class NvmlProbe {
 public:
  NvmlProbe() = default;
  ~NvmlProbe();
  NvmlProbe(const NvmlProbe&) = delete;
  NvmlProbe& operator=(const NvmlProbe&) = delete;

  // Loads and initialises NVML on the first call; false (and why, in
  // unavailable()) when there is no driver. Later calls cost nothing.
  bool load();
  const std::string& unavailable() const { return unavailable_; }

  // The GPUs this node's workers would use: CUDA_VISIBLE_DEVICES' entries
  // (indices or UUIDs) when set, else every device. Each is looked up; one
  // that does not answer (a lost GPU) makes the result an error line.
  struct Devices {
    int count = 0;
    std::string error;  // non-empty: a device that does not answer, or NVML failing
  };
  Devices visible(const std::optional<std::string>& cuda_visible_devices);

 private:
  void* lib_ = nullptr;
  bool tried_ = false;
  bool ok_ = false;
  std::string unavailable_;
  // NVML's C API, as documented in nvml.h (return 0 = NVML_SUCCESS).
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*by_index_)(unsigned, void**) = nullptr;
  int (*by_uuid_)(const char*, void**) = nullptr;
  const char* (*error_string_)(int) = nullptr;

  std::string error(int rc) const;
};

}  // namespace ddp::agent
