// The agent's side of torch's FileTimer protocol
// (torch.distributed.elastic.timer.FileTimerClient): a named pipe the workers
// write one JSON request per line to,
//   {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N}
// where T is a Unix time in seconds (negative: release the timer) and N the
// signal the client asks the worker to be reaped with (<= 0: never reap).
// Each client opens the pipe non-blocking, writes one line of at most
// PIPE_BUF bytes (atomic) and closes it. Served when the agent's environment
// has TORCHELASTIC_ENABLE_FILE_TIMER=1, at TORCHELASTIC_TIMER_FILE or, when
// that is unset, at a pipe in the run's log directory whose path the workers
// get in TORCHELASTIC_TIMER_FILE (as under torchrun).
//
// Thread-safety: the io thread only; requests are delivered on it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <filesystem>
#include <functional>
#include <string>

namespace ddp::agent {

struct TimerRequest {
  int pid = 0;
  std::string scope;
  double expiration_time = 0;  // Unix seconds; negative: release
  int signal = 0;
};

class FileTimerServer {
 public:
  using OnRequest = std::function<void(const TimerRequest&)>;

  // Creates the pipe at `path` (replacing a stale one) and starts reading.
  // Throws ConfigError naming TORCHELASTIC_TIMER_FILE when it cannot.
  FileTimerServer(boost::asio::io_context& io, std::filesystem::path path, OnRequest on_request);
  ~FileTimerServer();  // removes the pipe
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  void read();
  void on_line(const std::string& line);

  std::filesystem::path path_;
  OnRequest on_request_;
  boost::asio::posix::stream_descriptor pipe_;
  int keep_open_ = -1;  // our own write end: no EOF when the last client closes
  std::string buf_;
  bool discarding_ = false;  // inside a line longer than the limit, dropped to its end
  char chunk_[4096];
  bool warned_ = false;
};

}  // namespace ddp::agent
