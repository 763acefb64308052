// The preload zygote (agent/zygote/ddp_zygote.py) behind the process runner,
// with a stdlib module preloaded (no torch needed): a forked worker comes back
// with its own pid, output and exit status from under its own ddp-guard,
// PYTHONPATH entries only the worker has behave as at a fresh start, and
// connections that never finish their request cost only themselves.
#include "preload_zygote.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <sstream>
#include <thread>

#include "child_outcome.hpp"
#include "ddp/common/logging.hpp"
#include "process_runner.hpp"
#include "test_support.hpp"

using namespace ddp::agent;
using namespace ddp::test;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// False, after a "SKIP:" warning, when there is no kPython to run workers with.
bool have_python() {
  if (::access(kPython, X_OK) == 0) return true;
  WARN("SKIP: no " << kPython);
  return false;
}

using Outcome = ChildOutcome;

// Runs `script args...` forked from a zygote that preloaded json, with
// `zygote_env` for the zygote and `worker_env` for the worker. `before` runs
// on a thread of its own once the zygote is started (the zygote gets ready on
// the io thread), and the worker's spawn asks the zygote after it; `after`
// runs on that thread next, the zygote still up.
Outcome run_forked(const TempDir& dir, const std::vector<std::string>& argv,
                   std::vector<std::string> zygote_env, std::vector<std::string> worker_env,
                   const std::function<void(PreloadZygote&)>& before = {},
                   const std::function<void()>& after = {}) {
  boost::asio::io_context io;
  ProcessRunner runner(io);
  PreloadZygote zygote(io, kPython, {"json"}, dir / "zygote.sock", std::move(zygote_env),
                       ddp::log::get("agent"));
  zygote.start();
  Outcome o;
  ChildHandlers h;
  h.on_output = [&](StdStream s, std::string_view b) { (s == StdStream::kOut ? o.out : o.err).append(b); };
  h.on_exit = [&](int st) {
    o.status = st;
    io.stop();
  };
  SpawnSpec spec{kPython, {"-u"}, std::move(worker_env)};
  spec.args.insert(spec.args.end(), argv.begin(), argv.end());
  const auto spawn = [&] {
    runner.spawn(
        std::move(spec), std::move(h),
        [&](pid_t pid, const std::string& error) {
          o.pid = pid;
          o.error = error;
          if (pid < 0) io.stop();
        },
        {}, ZygoteSpawn{argv, [&] { return zygote.connect(); }});
  };
  std::thread prepare;
  if (before) {
    prepare = std::thread([&] {
      before(zygote);
      boost::asio::post(io, spawn);
      if (after) after();
    });
  } else {
    spawn();
  }
  io.run_for(std::chrono::seconds(60));
  if (prepare.joinable()) prepare.join();
  return o;
}

}  // namespace

TEST_CASE("a worker forked by the preload zygote reports its own pid, output and exit status") {
  TempDir dir;
  if (!have_python()) return;
  const auto script = (dir / "w.py").string();
  write_file(script,
             "import os, sys\n"
             "print('pid', os.getpid(), 'json', 'json' in sys.modules, 'argv', sys.argv[1:])\n"
             "guard = open('/proc/%d/cmdline' % os.getppid()).read().replace('\\0', ' ')\n"
             "print('guard', guard)\n"
             "sys.stderr.write('to stderr\\n')\n"
             "sys.exit(3)\n");
  auto o = run_forked(dir, {script, "a b"}, {"PATH=/usr/bin:/bin"}, {"PATH=/usr/bin:/bin", "RANK=0"});
  INFO(o.out << o.err << o.error);
  REQUIRE(o.pid > 0);
  CHECK_THAT(o.out, Catch::Contains("pid " + std::to_string(o.pid) + " json True argv ['a b']"));
  // The worker's parent is its guard, which adopted it.
  CHECK_THAT(o.out, Catch::Contains("ddp-guard") && Catch::Contains("--adopt-pid=" + std::to_string(o.pid)));
  CHECK_THAT(o.err, Catch::Contains("to stderr"));
  REQUIRE(WIFEXITED(o.status));
  CHECK(WEXITSTATUS(o.status) == 3);
}

TEST_CASE("PYTHONPATH entries only a forked worker has come first on sys.path and their sitecustomize runs") {
  TempDir dir;
  if (!have_python()) return;
  std::filesystem::create_directories(dir / "common");
  std::filesystem::create_directories(dir / "worker_only");
  write_file(dir / "common" / "sitecustomize.py", "print('common sitecustomize ran', flush=True)\n");
  write_file(dir / "worker_only" / "sitecustomize.py",
             "import os\nprint('worker sitecustomize ran rank=' + os.environ['RANK'], flush=True)\n");
  const auto script = (dir / "w.py").string();
  write_file(script,
             "import sys\n"
             "print('path', sys.path[1:3])\n");
  const std::string common = (dir / "common").string();
  const std::string worker_only = (dir / "worker_only").string();

  SECTION("a new entry with a sitecustomize first on the path: it runs in the worker, with its env") {
    auto o = run_forked(dir, {script}, {"PATH=/usr/bin:/bin", "PYTHONPATH=" + common},
                        {"PATH=/usr/bin:/bin", "RANK=5", "PYTHONPATH=" + worker_only + ":" + common});
    INFO(o.out << o.err << o.error);
    REQUIRE(o.pid > 0);
    CHECK_THAT(o.out, Catch::Contains("worker sitecustomize ran rank=5"));
    CHECK_THAT(o.out, Catch::Contains("path ['" + worker_only + "', '" + common + "']"));
  }
  SECTION("the zygote's sitecustomize still first: not run again") {
    auto o = run_forked(dir, {script}, {"PATH=/usr/bin:/bin", "PYTHONPATH=" + common},
                        {"PATH=/usr/bin:/bin", "RANK=5", "PYTHONPATH=" + common + ":" + worker_only});
    INFO(o.out << o.err << o.error);
    REQUIRE(o.pid > 0);
    CHECK_THAT(o.out, !Catch::Contains("sitecustomize ran"));
    CHECK_THAT(o.out, Catch::Contains("path ['" + common + "', '" + worker_only + "']"));
  }
}

namespace {

// Sends `text` with `fds` (SCM_RIGHTS) on a Unix socket.
void send_with_fds(int conn, const std::string& text, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  REQUIRE(::sendmsg(conn, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

// What the zygote sent on `conn` until it closed it, waiting at most `timeout`.
std::string read_until_closed(int conn, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{conn, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[512];
    const ssize_t n = ::read(conn, buf, sizeof(buf));
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out + "<still open>";
}

std::string pipe_name(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return "pipe:[" + std::to_string(st.st_ino) + "]";
}

}  // namespace

TEST_CASE("connections that never finish their request neither delay a worker's spawn nor leak into it") {
  TempDir dir;
  if (!have_python()) return;
  const auto script = (dir / "w.py").string();
  write_file(script,
             "import os\n"
             "names = []\n"
             "for f in os.listdir('/proc/self/fd'):\n"
             "    try:\n"
             "        names.append(os.readlink('/proc/self/fd/' + f))\n"
             "    except OSError:\n"
             "        pass  # listdir's own fd\n"
             "print('fds', sorted(names))\n");
  int silent = -1;
  int partial = -1;
  int sent[2] = {-1, -1};  // a pipe whose write end a half-sent request carries
  REQUIRE(::pipe(sent) == 0);
  std::string silent_got;
  std::string partial_got;
  auto o = run_forked(
      dir, {script}, {"PATH=/usr/bin:/bin"}, {"PATH=/usr/bin:/bin"},
      [&](PreloadZygote& z) {
        silent = z.connect();  // waits until the zygote is ready
        partial = z.connect();
        REQUIRE(silent >= 0);
        REQUIRE(partial >= 0);
        send_with_fds(partial, "{\"argv\": [\"half", {sent[1], sent[1], sent[1]});
      },
      [&] {
        // Each is dropped after its read timeout, told why.
        silent_got = read_until_closed(silent, std::chrono::seconds(20));
        partial_got = read_until_closed(partial, std::chrono::seconds(5));
      });
  INFO(o.out << o.err << o.error);
  REQUIRE(o.pid > 0);
  CHECK(WIFEXITED(o.status));
  // The worker holds none of the stdio another request sent.
  CHECK_THAT(o.out, Catch::Contains("fds [") && !Catch::Contains(pipe_name(sent[1])));
  CHECK(silent_got == "{\"error\": \"ddp-zygote: no whole request within 10 s\"}\n");
  CHECK_THAT(partial_got, Catch::Contains("no whole request"));
  for (int fd : {silent, partial, sent[0], sent[1]}) ::close(fd);
}

TEST_CASE("past 64 connections sending requests at once the oldest is dropped") {
  TempDir dir;
  if (!have_python()) return;
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  PreloadZygote zygote(io, kPython, {"json"}, dir / "zygote.sock", {"PATH=/usr/bin:/bin"},
                       ddp::log::get("agent"));
  zygote.start();
  std::thread loop([&] { io.run(); });  // the zygote gets ready on the io thread
  std::vector<int> conns;
  for (int i = 0; i < 65; ++i) {
    conns.push_back(zygote.connect());
    CHECK(conns.back() >= 0);  // not REQUIRE: the io thread must be joined
  }
  const std::string dropped = read_until_closed(conns.front(), std::chrono::seconds(5));
  io.stop();
  loop.join();
  CHECK_THAT(dropped,
             Catch::Contains("64 connections were sending requests at once; the oldest was dropped"));
  for (int fd : conns) ::close(fd);
}

namespace {

// The pids /proc lists as `pid`'s children (its main thread's: the zygote and
// its forks are single-threaded).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::istringstream in(
      read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t p = 0; in >> p;) out.push_back(p);
  return out;
}

// The running process whose command line holds `needle`, or -1.
pid_t find_process(const std::string& needle) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos) return std::stoi(name);
  }
  return -1;
}

// Gone, or a zombie not yet reaped: nothing that runs.
bool gone(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return stat.empty() || close == std::string::npos || stat.substr(close + 2, 1) == "Z";
}

}  // namespace

TEST_CASE(
    "a worker asked for once the zygote is idle comes from its parked standby and runs as one forked on "
    "request") {
  TempDir dir;
  if (!have_python()) return;
  const auto script = (dir / "w.py").string();
  write_file(
      script,
      "import os, sys\n"
      "print('pid', os.getpid(), 'guard', os.getppid(), 'rank', os.environ['RANK'], 'argv', sys.argv[1:],\n"
      "      'own session', os.getsid(0) == os.getppid())\n"
      "print('guard argv', open('/proc/%d/cmdline' % os.getppid()).read().replace('\\0', ' '))\n"
      "sys.stderr.write('to stderr\\n')\n"
      "sys.exit(int(os.environ['RANK']))\n");
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  ProcessRunner runner(io);
  PreloadZygote zygote(io, kPython, {"json"}, dir / "zygote.sock", {"PATH=/usr/bin:/bin"},
                       ddp::log::get("agent"));
  zygote.start();
  std::thread loop([&] { io.run(); });
  const auto spawn = [&](const std::string& rank) {
    auto o = std::make_shared<Outcome>();
    auto done = std::make_shared<std::promise<void>>();
    boost::asio::post(io, [&, rank, o, done] {
      ChildHandlers h;
      h.on_output = [o](StdStream s, std::string_view b) {
        (s == StdStream::kOut ? o->out : o->err).append(b);
      };
      h.on_exit = [o, done](int st) {
        o->status = st;
        done->set_value();
      };
      const std::vector<std::string> argv = {script, "x y"};
      SpawnSpec spec{kPython, {"-u", script, "x y"}, {"PATH=/usr/bin:/bin", "RANK=" + rank}};
      spec.own_session = true;
      runner.spawn(
          std::move(spec), std::move(h),
          [o, done](pid_t pid, const std::string& error) {
            o->pid = pid;
            o->error = error;
            if (pid < 0) done->set_value();
          },
          {}, ZygoteSpawn{argv, [&] { return zygote.connect(); }});
    });
    done->get_future().wait_for(std::chrono::seconds(60));
    return *o;
  };
  const Outcome first = spawn("0");
  INFO(first.out << first.err << first.error);
  CHECK(first.pid > 0);
  const pid_t zygote_pid = find_process((dir / "zygote.sock").string());
  REQUIRE(zygote_pid > 0);
  // Idle: the zygote forks a guard-to-be, which forks its worker-to-be.
  pid_t parked_guard = -1;
  pid_t parked_worker = -1;
  const auto parked = [&] {
    const auto g = children_of(zygote_pid);
    const auto w = g.size() == 1 ? children_of(g[0]) : std::vector<pid_t>{};
    if (w.size() != 1) return false;
    parked_guard = g[0];
    parked_worker = w[0];
    return true;
  };
  REQUIRE(wait_until(parked, std::chrono::seconds(10)));
  const Outcome second = spawn("3");
  INFO(second.out << second.err << second.error);
  // The request took the parked pair: same pids, and the worker is what a fork on request gives.
  CHECK(second.pid == parked_worker);
  CHECK_THAT(second.out,
             Catch::Contains("pid " + std::to_string(parked_worker) + " guard " +
                             std::to_string(parked_guard) + " rank 3 argv ['x y'] own session True"));
  CHECK_THAT(second.out,
             Catch::Contains("ddp-guard") && Catch::Contains("--adopt-pid=" + std::to_string(parked_worker)));
  CHECK_THAT(second.err, Catch::Contains("to stderr"));
  CHECK((WIFEXITED(second.status) && WEXITSTATUS(second.status) == 3));
  // A new pair is parked again. Its worker killed while parked: the next request is forked on request.
  REQUIRE(wait_until([&] { return parked() && parked_worker != second.pid; }, std::chrono::seconds(10)));
  REQUIRE(::kill(parked_worker, SIGKILL) == 0);
  REQUIRE(wait_until([&] { return gone(parked_worker); }, std::chrono::seconds(10)));  // its socket closed
  const Outcome third = spawn("5");
  INFO(third.out << third.err << third.error);
  CHECK(third.pid > 0);
  CHECK(third.pid != parked_worker);
  CHECK((WIFEXITED(third.status) && WEXITSTATUS(third.status) == 5));
  // And the pair parked after it goes with the zygote.
  REQUIRE(wait_until([&] { return parked() && parked_worker != third.pid; }, std::chrono::seconds(10)));
  // stop() belongs on the io thread (preload_zygote.hpp): the runner's table is that thread's.
  std::promise<void> stopped;
  boost::asio::post(io, [&] {
    zygote.stop();
    stopped.set_value();
  });
  stopped.get_future().wait();
  CHECK(wait_until([&] { return gone(parked_guard) && gone(parked_worker); }, std::chrono::seconds(10)));
  work.reset();
  io.stop();
  loop.join();
}
