// /proc reads that answer nullopt, never throw, when the process goes away.
#include "ddp/common/proc_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>

namespace {

// A child that waits to be killed.
pid_t start_child() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  REQUIRE(pid > 0);
  return pid;
}

void reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_CASE("a /proc file whose process was reaped after the open reads as nullopt, not as an exception") {
  const pid_t pid = start_child();
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  reap(pid);
  // The read fails with ESRCH: std::ifstream would throw here.
  std::optional<std::string> text;
  CHECK_NOTHROW(text = ddp::read_fd_to_end(fd));
  CHECK_FALSE(text.has_value());
  ::close(fd);
}

TEST_CASE("the parent of a live process is read from /proc, that of a reaped one is nullopt") {
  CHECK(ddp::proc_parent(::getpid()) == std::optional<pid_t>(::getppid()));
  const pid_t pid = start_child();
  CHECK(ddp::proc_parent(pid) == std::optional<pid_t>(::getpid()));
  reap(pid);
  CHECK_FALSE(ddp::proc_parent(pid).has_value());
  CHECK_FALSE(ddp::read_proc_file("/proc/" + std::to_string(pid) + "/environ").has_value());
}

TEST_CASE("read_proc_file returns the whole file, NUL bytes included") {
  const auto env = ddp::read_proc_file("/proc/self/environ");
  REQUIRE(env.has_value());
  CHECK(env->find('\0') != std::string::npos);
  CHECK_FALSE(ddp::read_proc_file("/proc/self/no-such-file").has_value());
}
