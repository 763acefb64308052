#include "fence_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

FenceFile::~FenceFile() {
  if (map_ != nullptr) ::munmap(map_, sizeof(*map_));
  if (!path_.empty()) ::unlink(path_.c_str());
}

bool FenceFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  void* map = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, sizeof(std::int64_t)) == 0) {
    map = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (map == MAP_FAILED) {
    log::get("agent")->warn(
        "cannot create the fence file {}: {}; a worker of this node is then killed when the store is lost "
        "only if ddprun itself still runs",
        path.string(), errno_text(err));
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  map_ = static_cast<std::int64_t*>(map);
  path_ = path.string();
  std::atomic_ref<std::int64_t>(*map_).store(deadline_ns_, std::memory_order_release);
  return true;
}

void FenceFile::publish(std::chrono::steady_clock::time_point deadline) {
  // steady_clock is CLOCK_MONOTONIC, the clock the guards read.
  const std::int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu_);
  deadline_ns_ = ns;
  if (map_ != nullptr) std::atomic_ref<std::int64_t>(*map_).store(ns, std::memory_order_release);
}

}  // namespace ddp::agent
