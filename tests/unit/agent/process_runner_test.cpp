// The process runner against real children (fake_worker, /bin/sh).
#include "process_runner.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace ddp::agent;
using ddp::test::bin;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::write_file;

namespace {
struct Outcome {
  pid_t pid = -1;
  std::string error;
  std::string out;
  std::string err;
  int status = -1;
  bool exited = false;
};

Outcome run_child(SpawnSpec spec, std::function<void(pid_t)> after_spawn = nullptr) {
  boost::asio::io_context io;
  ProcessRunner runner(io);
  Outcome o;
  ChildHandlers h;
  h.on_output = [&](StdStream s, std::string_view b) { (s == StdStream::kOut ? o.out : o.err).append(b); };
  h.on_exit = [&](int st) {
    o.status = st;
    o.exited = true;
    io.stop();
  };
  runner.spawn(std::move(spec), std::move(h), [&](pid_t pid, const std::string& error) {
    o.pid = pid;
    o.error = error;
    if (pid < 0) io.stop();
    if (pid > 0 && after_spawn) after_spawn(pid);
  });
  io.run_for(std::chrono::seconds(20));
  return o;
}
}  // namespace

TEST_CASE("a child's output and exit code arrive, output before the exit") {
  auto o = run_child({"/bin/sh", {"-c", "echo hello; echo bad >&2; exit 3"}, {"PATH=/usr/bin:/bin"}});
  REQUIRE(o.exited);
  CHECK(o.out == "hello\n");
  CHECK(o.err == "bad\n");
  CHECK(WIFEXITED(o.status));
  CHECK(WEXITSTATUS(o.status) == 3);
}

TEST_CASE("no line is lost when a child prints a lot and dies at once") {
  auto o = run_child({"/bin/sh",
                      {"-c", "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; kill -9 $$"},
                      {"PATH=/usr/bin:/bin"}});
  REQUIRE(o.exited);
  CHECK(WIFSIGNALED(o.status));
  CHECK(WTERMSIG(o.status) == SIGKILL);
  CHECK(std::count(o.out.begin(), o.out.end(), '\n') == 2000);
  CHECK(o.out.rfind("line 1999\n") == o.out.size() - 10);
}

TEST_CASE("a child sees exactly the environment it was given and only fds 0, 1 and 2") {
  TempDir dir;
  // An fd the agent opened without O_CLOEXEC must not leak either.
  const int leaky = ::dup(2);
  auto o = run_child(
      {bin("fake_worker").string(), {"a b", "c"}, {"RANK=7", "FAKE_ENV_DUMP=" + (dir.path()).string()}});
  ::close(leaky);
  REQUIRE(o.exited);
  const auto dump = read_file(dir / "rank_7.env");
  CHECK_THAT(dump, Catch::Contains("FDS=0,1,2\n"));
  CHECK_THAT(dump, Catch::Contains("ARGS=a b c\n"));
  CHECK_THAT(dump, Catch::StartsWith("RANK=7\n"));
  CHECK(std::count(dump.begin(), dump.end(), '\n') == 4);  // 2 env vars + FDS + ARGS
}

TEST_CASE("a child runs in its own process group, led by its guard, and the pid reported is the child's") {
  TempDir dir;
  pid_t pgid = -1;
  const auto pidfile = (dir / "pid").string();
  const auto go = (dir / "go").string();
  // The child waits for the test to have looked at it: an exited child has no group.
  auto o = run_child({"/bin/sh",
                      {"-c", "echo $$ > " + pidfile + "; while [ ! -e " + go + " ]; do sleep 0.01; done"},
                      {"PATH=/usr/bin:/bin"}},
                     [&](pid_t pid) {
                       pgid = ::getpgid(pid);
                       write_file(go, "");
                     });
  REQUIRE(o.exited);
  CHECK(std::to_string(o.pid) + "\n" == read_file(pidfile));
  CHECK(pgid > 0);
  CHECK(pgid != ::getpgrp());
}

TEST_CASE("signal_group reaches the child and what it forked") {
  TempDir dir;
  boost::asio::io_context io;
  ProcessRunner runner(io);
  int status = -1;
  ChildHandlers h;
  h.on_exit = [&](int st) {
    status = st;
    io.stop();
  };
  const auto pidfile = (dir / "grandchild").string();
  runner.spawn({"/bin/sh", {"-c", "sleep 100 & echo $! > " + pidfile + "; wait"}, {"PATH=/usr/bin:/bin"}},
               std::move(h), [&](pid_t pid, const std::string&) {
                 REQUIRE(ddp::test::wait_until([&] { return !read_file(pidfile).empty(); }));
                 runner.signal_group(pid, SIGTERM);
               });
  io.run_for(std::chrono::seconds(20));
  REQUIRE(WIFSIGNALED(status));
  const pid_t grandchild = std::stoi(read_file(pidfile));
  CHECK(ddp::test::wait_until([&] { return !ddp::test::pid_alive(grandchild); }));
}

TEST_CASE("a SIGKILL through signal_group also reaches a grandchild that called setsid") {
  TempDir dir;
  boost::asio::io_context io;
  ProcessRunner runner(io);
  int status = -1;
  ChildHandlers h;
  h.on_exit = [&](int st) {
    status = st;
    io.stop();
  };
  const auto pidfile = (dir / "grandchild").string();
  // The grandchild leaves the group and ignores SIGTERM: only a SIGKILL aimed
  // at it by pid (from the guard) ends it.
  runner.spawn({"/bin/sh",
                {"-c", "setsid sh -c 'trap \"\" TERM; echo $$ > " + pidfile + "; exec sleep 100' & wait"},
                {"PATH=/usr/bin:/bin"}},
               std::move(h), [&](pid_t pid, const std::string&) {
                 REQUIRE(ddp::test::wait_until([&] { return !read_file(pidfile).empty(); }));
                 runner.signal_group(pid, SIGKILL);
               });
  io.run_for(std::chrono::seconds(20));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const pid_t grandchild = std::stoi(read_file(pidfile));
  CHECK(ddp::test::wait_until([&] { return !ddp::test::pid_alive(grandchild); }, std::chrono::seconds(5)));
}

TEST_CASE("a program that cannot be executed is reported, not run") {
  auto o = run_child({"/nonexistent/program", {}, {}});
  CHECK(o.pid < 0);
  CHECK_THAT(o.error, Catch::Contains("/nonexistent/program"));
}

TEST_CASE("a child gets default signal dispositions even when the agent ignores SIGPIPE") {
  auto old = ::signal(SIGPIPE, SIG_IGN);
  auto o = run_child({"/bin/sh", {"-c", "grep SigIgn /proc/self/status"}, {"PATH=/usr/bin:/bin"}});
  ::signal(SIGPIPE, old);
  REQUIRE(o.exited);
  // SigIgn is a hex mask of ignored signals; bit SIGPIPE-1 set would mean inherited SIG_IGN.
  const auto mask = std::stoull(o.out.substr(o.out.find(':') + 1), nullptr, 16);
  CHECK((mask & (1ULL << (SIGPIPE - 1))) == 0);
}
