#include "log_syncer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>

#include "persistence_format.hpp"

namespace ddp::store::server {

LogSyncer::LogSyncer(boost::asio::io_context& io, Done done) : io_(io), done_(std::move(done)) {}

LogSyncer::~LogSyncer() { stop(); }

bool LogSyncer::start(int fd, std::uint64_t seq) {
  if (busy_) return false;
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (dup < 0) {
    // Out of descriptors: sync here rather than not at all.
    const int err = format::sync_fd(fd, "log.fsync", /*data_only=*/true);
    busy_ = true;
    boost::asio::post(io_, [this, seq, err] { finished(seq, err); });
    return true;
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(dup);
      return false;
    }
    fd_ = dup;
    seq_ = seq;
    if (!started_thread_) {
      started_thread_ = true;
      thread_ = std::thread([this] { run(); });
    }
  }
  busy_ = true;
  cv_.notify_one();
  return true;
}

void LogSyncer::finished(std::uint64_t seq, int err) {
  busy_ = false;
  if (!stopped_) done_(seq, err);
}

void LogSyncer::stop() {
  stopped_ = true;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  busy_ = false;
}

void LogSyncer::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return fd_ >= 0 || stopping_; });
    if (fd_ < 0) return;  // stopping, nothing to sync
    const int fd = std::exchange(fd_, -1);
    const auto seq = seq_;
    lock.unlock();
    const int err = format::sync_fd(fd, "log.fsync", /*data_only=*/true);
    ::close(fd);
    boost::asio::post(io_, [this, seq, err] { finished(seq, err); });
    lock.lock();
    if (stopping_) return;
  }
}

}  // namespace ddp::store::server
