#include "fence_deadline.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

namespace ddp::guard {

FenceDeadline::FenceDeadline(const std::string& path) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  void* map = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map != MAP_FAILED) map_ = static_cast<const std::int64_t*>(map);
}

FenceDeadline::~FenceDeadline() {
  if (map_ != nullptr) ::munmap(const_cast<std::int64_t*>(map_), sizeof(*map_));
}

std::chrono::milliseconds FenceDeadline::left() const {
  if (map_ == nullptr) return std::chrono::milliseconds(-1);
  const std::int64_t deadline = __atomic_load_n(map_, __ATOMIC_ACQUIRE);
  if (deadline <= 0) return std::chrono::milliseconds(-1);
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const std::int64_t left_ns = deadline - (static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec);
  if (left_ns <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds((left_ns + 999999) / 1000000);  // rounded up: never wake early
}

}  // namespace ddp::guard
