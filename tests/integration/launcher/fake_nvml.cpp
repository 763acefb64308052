// A stand-in libnvidia-ml.so.1 for the health checks' GPU rules on machines
// without a GPU: the test puts its folder on LD_LIBRARY_PATH. It answers the
// few NVML calls the agent makes, from the environment, read on each call so
// that a test can take a GPU away between two restart rounds:
//   DDP_TEST_FAKE_NVML_GPUS_FILE  a file holding the GPU count, else
//   DDP_TEST_FAKE_NVML_GPUS       the GPU count (default 0);
//   DDP_TEST_FAKE_NVML_LOST       the index of a GPU that is counted but does
//                                 not answer (fallen off the bus).
// UUIDs are GPU-fake-<index>.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotFound = 6;
constexpr int kGpuIsLost = 15;

unsigned gpu_count() {
  if (const char* file = std::getenv("DDP_TEST_FAKE_NVML_GPUS_FILE")) {
    unsigned n = 0;
    std::ifstream(file) >> n;
    return n;
  }
  const char* v = std::getenv("DDP_TEST_FAKE_NVML_GPUS");
  return v != nullptr ? static_cast<unsigned>(std::atoi(v)) : 0;
}

int lookup(unsigned index, void** device, int missing) {
  if (index >= gpu_count()) return missing;
  const char* lost = std::getenv("DDP_TEST_FAKE_NVML_LOST");
  if (lost != nullptr && static_cast<unsigned>(std::atoi(lost)) == index) return kGpuIsLost;
  *device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index) + 1);
  return kSuccess;
}

}  // namespace

#define FAKE_NVML extern "C" __attribute__((visibility("default")))

FAKE_NVML int nvmlInit_v2() { return kSuccess; }
FAKE_NVML int nvmlShutdown() { return kSuccess; }
FAKE_NVML int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = gpu_count();
  return kSuccess;
}
FAKE_NVML int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  return lookup(index, device, kInvalidArgument);
}
FAKE_NVML int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  const std::string prefix = "GPU-fake-";
  if (std::strncmp(uuid, prefix.c_str(), prefix.size()) != 0) return kNotFound;
  return lookup(static_cast<unsigned>(std::atoi(uuid + prefix.size())), device, kNotFound);
}
FAKE_NVML const char* nvmlErrorString(int rc) {
  switch (rc) {
    case kSuccess:
      return "Success";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotFound:
      return "Not Found";
    case kGpuIsLost:
      return "GPU is lost";
  }
  return "Unknown Error";
}
