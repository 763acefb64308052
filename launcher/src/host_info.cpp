#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "ddp/agent/gpu_count.hpp"
#include "ddp/agent/worker_env.hpp"
#include "ddp/launcher/launch_options.hpp"

namespace ddp::launcher {

int detect_gpu_count(const std::map<std::string, std::string>& env) {
  // The driver lists one directory per device; reading it needs neither CUDA
  // nor nvidia-smi, and costs microseconds (--help and startup stay fast).
  int physical = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++physical;
  }
  const auto cvd = env.find("CUDA_VISIBLE_DEVICES");
  if (cvd == env.end()) return physical;
  // CUDA stops at the first invalid entry; "-1" or "" hides every device.
  int visible = 0;
  std::stringstream items(cvd->second);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty() || item[0] == '-') break;
    ++visible;
  }
  return std::min(visible, physical);
}

HostInfo current_host() {
  HostInfo h;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) h.hostname = name;
  if (h.hostname.empty()) h.hostname = "localhost";
  h.pid = static_cast<int>(::getpid());
  h.env = agent::current_environment();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    h.cpu_count = CPU_COUNT(&set);
  } else {
    h.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  }
  h.gpu_count = detect_gpu_count(h.env);
  h.probe_gpus = [cvd = h.env.count("CUDA_VISIBLE_DEVICES") != 0
                            ? std::optional<std::string>(h.env.at("CUDA_VISIBLE_DEVICES"))
                            : std::nullopt] { return agent::nvml_gpu_count(cvd); };
  return h;
}

}  // namespace ddp::launcher
