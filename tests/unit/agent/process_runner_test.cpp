// The process runner and its fork/exec against real children (fake_worker, /bin/sh).
#include "process_runner.hpp"

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "child_outcome.hpp"
#include "fork_exec.hpp"
#include "test_support.hpp"

using namespace ddp::agent;
using namespace ddp::test;

namespace {
using Outcome = ChildOutcome;

// Runs `program` to its end (20 s at most); `after_spawn` is called with the
// runner and the child's pid once it is started.
Outcome run_child(Program program, std::function<void(ProcessRunner&, pid_t)> after_spawn = nullptr) {
  SpawnSpec spec;
  static_cast<Program&>(spec) = std::move(program);
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
    if (pid > 0 && after_spawn) after_spawn(runner, pid);
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
                     [&](ProcessRunner&, pid_t pid) {
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
  const auto pidfile = (dir / "grandchild").string();
  auto o =
      run_child({"/bin/sh", {"-c", "sleep 100 & echo $! > " + pidfile + "; wait"}, {"PATH=/usr/bin:/bin"}},
                [&](ProcessRunner& runner, pid_t pid) {
                  REQUIRE(ddp::test::wait_until([&] { return !read_file(pidfile).empty(); }));
                  runner.signal_group(pid, SIGTERM);
                });
  REQUIRE(WIFSIGNALED(o.status));
  const pid_t grandchild = std::stoi(read_file(pidfile));
  CHECK(ddp::test::wait_until([&] { return !ddp::test::pid_alive(grandchild); }));
}

TEST_CASE("a SIGKILL through signal_group also reaches a grandchild that called setsid") {
  TempDir dir;
  const auto pidfile = (dir / "grandchild").string();
  // The grandchild leaves the group and ignores SIGTERM: only a SIGKILL aimed
  // at it by pid (from the guard) ends it.
  auto o =
      run_child({"/bin/sh",
                 {"-c", "setsid sh -c 'trap \"\" TERM; echo $$ > " + pidfile + "; exec sleep 100' & wait"},
                 {"PATH=/usr/bin:/bin"}},
                [&](ProcessRunner& runner, pid_t pid) {
                  REQUIRE(ddp::test::wait_until([&] { return !read_file(pidfile).empty(); }));
                  runner.signal_group(pid, SIGKILL);
                });
  REQUIRE(WIFSIGNALED(o.status));
  CHECK(WTERMSIG(o.status) == SIGKILL);
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

// A lock another thread holds at the moment of a fork stays held in the child:
// a child that takes one (Boost.Process's launcher does, through
// io_context::notify_fork) hangs before exec. The io thread here keeps the
// reactor's locks busy with zero-length timers while hundreds of guards are forked.
TEST_CASE("spawns never hang while the io thread is busy, and every child's exit arrives") {
  constexpr int kSpawns = ddp::test::kSanitized ? 200 : 1000;
  boost::asio::io_context io;
  ProcessRunner runner(io);
  std::vector<std::unique_ptr<boost::asio::steady_timer>> busy;
  bool done = false;
  std::function<void(boost::asio::steady_timer&)> spin = [&](boost::asio::steady_timer& t) {
    t.expires_after(std::chrono::microseconds(0));
    t.async_wait([&](boost::system::error_code ec) {
      if (!ec && !done) spin(t);
    });
  };
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<boost::asio::steady_timer>(io));
    spin(*busy.back());
  }
  int exited = 0;
  int failed = 0;
  std::function<void(int)> start;
  // Four in flight, like a small group restarting: each end starts the next.
  auto finished = [&](int i) {
    if (exited + failed == kSpawns) done = true;
    if (i + 4 < kSpawns) start(i + 4);
  };
  start = [&](int i) {
    ChildHandlers h;
    h.on_exit = [&, i](int) {
      ++exited;
      finished(i);
    };
    runner.spawn({{"/bin/true", {}, {}}}, std::move(h), [&, i](pid_t pid, const std::string& error) {
      if (pid > 0) return;
      UNSCOPED_INFO("spawn " << i << ": " << error);
      ++failed;
      finished(i);
    });
  };
  for (int i = 0; i < 4; ++i) start(i);
  io.run_for(std::chrono::seconds(60));
  CHECK(failed == 0);
  CHECK(exited == kSpawns);
}

TEST_CASE("a child that does not reach its exec in time is killed and reported, not waited on") {
  ExecSpec spec;
  spec.executable = "/bin/true";
  spec.agent_pid = ::getpid();
  spec.stop_before_exec = true;
  const auto start = std::chrono::steady_clock::now();
  const ForkExecResult r = fork_exec(spec, std::chrono::milliseconds(300), {});
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(r.pid < 0);
  CHECK_FALSE(r.cancelled);
  CHECK_THAT(r.error, Catch::Contains("did not exec within 300 ms"));
  CHECK(took < std::chrono::seconds(5));
  // Killed and reaped: no child of ours is left, not even a zombie.
  CHECK(::waitpid(-1, nullptr, WNOHANG) < 0);
  CHECK(errno == ECHILD);
}

TEST_CASE("cancelling a spawn ends its wait for the exec at once and kills the child") {
  const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(efd >= 0);
  std::atomic<bool> cancelled{false};
  ExecSpec spec;
  spec.executable = "/bin/true";
  spec.agent_pid = ::getpid();
  spec.stop_before_exec = true;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the child is stopped by then, or soon
    cancelled = true;
    const std::uint64_t one = 1;
    CHECK(::write(efd, &one, sizeof(one)) == sizeof(one));
  });
  const ForkExecResult r = fork_exec(spec, std::chrono::seconds(30), {efd, [&] { return cancelled.load(); }});
  canceller.join();
  ::close(efd);
  CHECK(r.pid < 0);
  CHECK(r.cancelled);
  CHECK(::waitpid(-1, nullptr, WNOHANG) < 0);
}

TEST_CASE("cancel_spawns answers queued spawns with pid 0 and starts none of them") {
  TempDir dir;
  constexpr int kSpawns = 30;
  boost::asio::io_context io;
  ProcessRunner runner(io);
  int answered = 0;
  int cancelled = 0;
  std::vector<pid_t> started;
  // The first spawn holds the spawner thread (its preload connect runs there
  // and waits), so the other spawns are queued behind it, on a busy machine too.
  std::atomic<bool> holding{false};
  std::atomic<bool> release{false};
  ZygoteSpawn hold{{}, [&] {
                     holding = true;
                     while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                     return -1;  // no zygote: spawn normally
                   }};
  for (int i = 0; i < kSpawns; ++i) {
    const std::string mark = (dir / ("ran." + std::to_string(i))).string();
    runner.spawn(
        {{"/bin/sh", {"-c", "touch " + mark}, {"PATH=/usr/bin:/bin"}}}, {},
        [&](pid_t pid, const std::string& error) {
          INFO(error);
          CHECK(pid >= 0);
          if (pid == 0) ++cancelled;
          if (pid > 0) started.push_back(pid);
          if (++answered == kSpawns) io.stop();
        },
        {}, i == 0 ? hold : ZygoteSpawn{});
    if (i == 0) REQUIRE(ddp::test::wait_until([&] { return holding.load(); }));
  }
  runner.cancel_spawns();
  release = true;
  io.run_for(std::chrono::seconds(30));
  REQUIRE(answered == kSpawns);
  // The spawner was past the queue for the first one only.
  CHECK(cancelled >= kSpawns - 1);
  CHECK(static_cast<int>(started.size()) == kSpawns - cancelled);
  // Whatever started, started once; nothing cancelled ran.
  CHECK(ddp::test::wait_until([&] {
    int ran = 0;
    for (int i = 0; i < kSpawns; ++i) ran += std::filesystem::exists(dir / ("ran." + std::to_string(i)));
    return ran == static_cast<int>(started.size());
  }));
  for (int i = 1; i < kSpawns; ++i) CHECK_FALSE(std::filesystem::exists(dir / ("ran." + std::to_string(i))));
}
