#include "nvml_probe.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <sstream>

#include "ddp/agent/gpu_count.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::agent {

namespace {

template <typename Fn>
bool bind_symbol(void* lib, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(lib, name));
  return out != nullptr;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

NvmlProbe::~NvmlProbe() {
  if (ok_ && shutdown_ != nullptr) shutdown_();
  // The library stays loaded: the driver's own threads may still run in it.
}

std::string NvmlProbe::error(int rc) const {
  const char* text = error_string_ != nullptr ? error_string_(rc) : nullptr;
  return text != nullptr ? std::string(text) : "NVML error " + std::to_string(rc);
}

bool NvmlProbe::load() {
  if (tried_) return ok_;
  tried_ = true;
  lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    const char* why = ::dlerror();
    unavailable_ =
        "cannot load libnvidia-ml.so.1 (" + std::string(why != nullptr ? why : "no NVIDIA driver") + ")";
    return false;
  }
  if (!bind_symbol(lib_, "nvmlInit_v2", init_) || !bind_symbol(lib_, "nvmlShutdown", shutdown_) ||
      !bind_symbol(lib_, "nvmlDeviceGetCount_v2", count_) ||
      !bind_symbol(lib_, "nvmlDeviceGetHandleByIndex_v2", by_index_) ||
      !bind_symbol(lib_, "nvmlDeviceGetHandleByUUID", by_uuid_) ||
      !bind_symbol(lib_, "nvmlErrorString", error_string_)) {
    unavailable_ = "libnvidia-ml.so.1 lacks the NVML v2 API";
    return false;
  }
  if (const int rc = init_(); rc != 0) {
    unavailable_ = "nvmlInit failed: " + error(rc);
    return false;
  }
  ok_ = true;
  return true;
}

NvmlProbe::Devices NvmlProbe::visible(const std::optional<std::string>& cuda_visible_devices) {
  Devices out;
  unsigned total = 0;
  if (const int rc = count_(&total); rc != 0) {
    out.error = "nvmlDeviceGetCount: " + error(rc);
    return out;
  }
  if (!cuda_visible_devices) {
    for (unsigned i = 0; i < total; ++i) {
      void* dev = nullptr;
      if (const int rc = by_index_(i, &dev); rc != 0) {
        out.error = "GPU " + std::to_string(i) + " does not answer: " + error(rc);
        return out;
      }
      ++out.count;
    }
    return out;
  }
  // CUDA's rule: the list ends at the first entry that names no device.
  std::stringstream items(*cuda_visible_devices);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = trim(item);
    if (item.empty()) break;
    void* dev = nullptr;
    int rc = 0;
    if (item.rfind("GPU-", 0) == 0) {
      rc = by_uuid_(item.c_str(), &dev);
    } else if (item.rfind("MIG-", 0) == 0) {
      ++out.count;  // a MIG instance: its parent GPU was counted by NVML
      continue;
    } else {
      const auto index = parse_int<long>(item);
      if (!index || *index < 0 || *index >= static_cast<long>(total)) break;
      rc = by_index_(static_cast<unsigned>(*index), &dev);
    }
    if (rc != 0) {
      out.error = "GPU " + item + " (CUDA_VISIBLE_DEVICES) does not answer: " + error(rc);
      return out;
    }
    ++out.count;
  }
  return out;
}

std::optional<int> nvml_gpu_count(const std::optional<std::string>& cuda_visible_devices) {
  NvmlProbe nvml;
  if (!nvml.load()) return std::nullopt;
  const auto found = nvml.visible(cuda_visible_devices);
  if (!found.error.empty()) return std::nullopt;
  return found.count;
}

}  // namespace ddp::agent
