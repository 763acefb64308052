// The process runner's view of one started worker (process_runner.cpp):
// Child, the guard (or the zygote's connection) whose exit it waits for and
// the worker's stdout/stderr it reads to EOF, and PendingReport, the guard's
// report of the worker it started, read with a deadline. io thread only.
#pragma once

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/process/v2/process.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "containment.hpp"
#include "process_runner.hpp"

namespace ddp::agent {

// How long a guard may take to start its worker and report it (or the
// zygote its worker) before the spawn fails and what was started is killed.
inline constexpr std::chrono::milliseconds kGuardReportTimeout{10000};

// A guard's report, read to EOF on the io thread, with a deadline.
struct PendingReport : std::enable_shared_from_this<PendingReport> {
  PendingReport(boost::asio::io_context& io, int fd, std::string exe, pid_t guard)
      : desc(io, fd), timer(io), executable(std::move(exe)), guard_pid(guard) {}

  // The agent is stopping: the guard kills what it started and exits, and
  // then reports (or closes its end) at once.
  void cancel() const;

  void read(std::function<void(GuardReport)> done);

  void next();

  void finish(GuardReport r);

  boost::asio::posix::stream_descriptor desc;
  boost::asio::steady_timer timer;
  std::string executable;
  pid_t guard_pid;
  std::string text;
  std::array<char, 512> chunk{};
  bool finished = false;
  std::function<void(GuardReport)> done_;
};

struct Child : std::enable_shared_from_this<Child> {
  Child(boost::asio::io_context& io, int out_fd, int err_fd, ChildHandlers h)
      : out(io, out_fd), err(io, err_fd), drain(io), handlers(std::move(h)) {}

  // The guard, our child; or, for a worker forked by the preload zygote (the
  // guard is the zygote's child), the connection its exit line comes on.
  std::optional<boost::process::v2::basic_process<boost::asio::io_context::executor_type>> proc;
  std::optional<boost::asio::posix::stream_descriptor> zygote_conn;
  boost::asio::streambuf zygote_buf;
  boost::asio::posix::stream_descriptor out;
  boost::asio::posix::stream_descriptor err;
  boost::asio::steady_timer drain;
  ChildHandlers handlers;
  std::array<char, 16384> out_buf{};
  std::array<char, 16384> err_buf{};
  bool out_open = true;
  bool err_open = true;
  bool exited = false;
  bool reported = false;
  int status = 0;
  pid_t group = -1;  // the guard's pid, which leads the worker's process group
  bool guarded = false;
  pid_t server_pid = 0;           // the guard server that forked the guard, if one did
  std::string cgroup;             // the worker's cgroup v2, if its guard made one
  std::function<void()> on_done;  // unregisters from the runner

  void start();

  void on_guard_exit(int wait_status);

  void read(StdStream which);

  void close_pipes();

  void maybe_report();
};

// Once per server, on the io thread: its guards' exits are lost with it.
void report_server_lost(pid_t server);

}  // namespace ddp::agent
