// The checks a node passes before it joins a rendezvous (docs/agent-recovery.md,
// "Health checks"): filled from ddprun's --health_* flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ddp::agent {

struct HealthConfig {
  // --health_gpus: GPUs NVML must see, each answering, before the node joins.
  // kAutoGpus: nproc_per_node of them, or as many as the first check saw if
  // fewer (workers sharing GPUs or using none), where NVML loads and
  // CUDA_VISIBLE_DEVICES does not hide every GPU; 0: no GPU check.
  static constexpr int kAutoGpus = -1;
  int gpus = kAutoGpus;
  // --health_paths: directories that must be readable, writable and hold
  // min_free_mb; --log_dir, when set, is checked the same way.
  std::vector<std::filesystem::path> paths;
  // 100 MiB: room for a rank's logs and error files, far below any
  // checkpoint, so a healthy node never fails it by default.
  std::uint64_t min_free_mb = 100;
  // --health_store_rtt_ms: a store round trip longer than this is unhealthy;
  // 0: no bound. A second is far beyond any healthy network and below the
  // rendezvous timeouts.
  std::chrono::milliseconds max_store_rtt{1000};
  // --health_check: run by /bin/sh -c; exit 0 is healthy, else its last
  // stderr line is the reason. Killed (its process group) at command_timeout.
  std::string command;
  std::chrono::milliseconds command_timeout{std::chrono::seconds(60)};
  // An unhealthy node retries after retry_interval, doubling up to a minute,
  // and gives up (exit 5) after max_retries failed retries.
  int max_retries = 5;
  std::chrono::milliseconds retry_interval{std::chrono::seconds(5)};
};

}  // namespace ddp::agent
