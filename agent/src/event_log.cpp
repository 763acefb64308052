#include "event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

EventLog::EventLog(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw ConfigError("--event_log: cannot open '" + path.string() +
                      "' for appending: " + std::strerror(errno));
  }
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::write(const std::string& event, const nlohmann::json& fields) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json line = {
      {"ts", std::chrono::duration<double>(now).count()},
      {"event", event},
  };
  for (const auto& [k, v] : fields.items()) line[k] = v;
  // Replace invalid UTF-8 (a reason quoting worker output) instead of throwing.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!warned_) {
        warned_ = true;
        log::get("agent")->warn("--event_log: cannot write to '{}': {}", path_.string(),
                                std::strerror(errno));
      }
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace ddp::agent
