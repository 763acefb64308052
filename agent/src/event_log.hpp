// ddprun --event_log FILE: one JSON object per line per lifecycle event, for
// operators' log shippers and for tests. Lines are appended with one write()
// each, so concurrent agents sharing a file never interleave within a line.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace ddp::agent {

class EventLog {
 public:
  // Opens (creating) `path` for appending, close-on-exec so workers never
  // inherit it. Throws ConfigError naming --event_log and the file.
  explicit EventLog(const std::filesystem::path& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Writes {"ts": <unix seconds>, "event": event, ...fields} as one line. A
  // failing write (disk full) is reported once on the log and not retried:
  // the event log must never stop the training.
  void write(const std::string& event, const nlohmann::json& fields);

 private:
  int fd_ = -1;
  std::filesystem::path path_;
  bool warned_ = false;
};

}  // namespace ddp::agent
