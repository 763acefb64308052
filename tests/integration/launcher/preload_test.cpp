// --preload without torch (a stdlib module): the real ddprun and its zygote,
// a stranger on the zygote's socket, and what ps, pgrep and /proc show of a
// forked worker. torch's own runs are in
// tests/integration/torch/preload_test.cpp.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

namespace {

// A connection to the Unix socket at `path` that never sends a byte; -1 if it cannot connect.
int connect_silently(const fs::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// The zygote's socket in the run directory under `logs` (--standalone names the run).
fs::path zygote_socket(const fs::path& logs) {
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(logs, ec)) {
    if (fs::exists(run.path() / "zygote.sock")) return run.path() / "zygote.sock";
  }
  return {};
}

}  // namespace

TEST_CASE("a silent connection to the preload zygote delays neither a failure nor the restart") {
  TempDir dir;
  // Attempt 0 fails when the test says so; its replacement, forked from the
  // zygote like it, succeeds.
  write_file(dir / "w.py",
             "import os, sys, time\n"
             "attempt = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
             "forked = '--adopt-pid' in open('/proc/%d/cmdline' % os.getppid()).read()\n"
             "print('attempt', attempt, 'forked', forked, flush=True)\n"
             "if attempt == '0':\n"
             "    while not os.path.exists(sys.argv[1]):\n"
             "        time.sleep(0.02)\n"
             "    sys.exit(1)\n");
  const auto logs = dir / "logs";
  Process p(ddprun_argv({"--standalone", "--nproc_per_node=1", "--max_restarts=1", "--preload", "json",
                         "--python", "/usr/bin/python3", "--log_dir", logs.string(), (dir / "w.py").string(),
                         (dir / "fail").string()}),
            dir.path(), clean_env({}), "ddprun");
  REQUIRE(wait_until([&] { return p.out().find("attempt 0 forked True") != std::string::npos; }, 30s));
  // Held open, silent, for the rest of the test: the zygote used to wait for
  // its request before serving anything else, the exit of the workers it
  // forked included.
  const int silent = connect_silently(zygote_socket(logs));
  REQUIRE(silent >= 0);
  write_file(dir / "fail", "");
  const auto code = p.wait(60s);
  INFO(p.out() << p.err());
  CHECK(code == 0);
  CHECK_THAT(p.out(), Catch::Contains("attempt 1 forked True"));
  CHECK_THAT(p.err(), !Catch::Contains("did not answer"));
  ::close(silent);
}

namespace {

// /proc/PID/NAME of a running process, or "" once it is gone.
std::string proc_file(pid_t pid, const char* name) {
  return read_file(fs::path("/proc") / std::to_string(pid) / name);
}

// The lines of `text` as a set (pgrep's pids).
std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.insert(line);
  return out;
}

// `name` on PATH (procps' ps and pgrep), or "" when it is not there.
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((fs::path(d) / name).c_str(), X_OK) == 0) return (fs::path(d) / name).string();
  }
  return "";
}

}  // namespace

TEST_CASE("ps, pgrep -f and /proc show a preloaded worker as the exec'd worker it replaces") {
  TempDir dir;
  const std::string python = "/usr/bin/python3";
  const std::string ps_tool = on_path("ps");
  const std::string pgrep_tool = on_path("pgrep");
  if (::access(python.c_str(), X_OK) != 0 || ps_tool.empty() || pgrep_tool.empty()) {
    WARN("SKIP: needs " << python << ", ps and pgrep (procps)");
    return;
  }
  // The worker writes its pid and its environment as the kernel lays it out
  // (os.environ keeps the C environment's order), then waits for the test.
  const auto script = (dir / "find_me_train.py").string();
  write_file(
      script,
      "import os, sys, time\n"
      "parent = open('/proc/%d/cmdline' % os.getppid()).read()\n"
      // A session of its own, led by its group's leader (its guard), and no
      // controlling terminal: ddprun's output is no terminal here.
      "stat = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"
      "pgrp, session, tty_nr = (int(f) for f in stat[2:5])\n"
      "print('argv', sys.argv[1:], 'forked', '--adopt-pid' in parent, 'own session', session == pgrp,\n"
      "      'tty', tty_nr, flush=True)\n"
      "env = b''.join(os.fsencode(k) + b'=' + os.fsencode(v) + b'\\0' for k, v in os.environ.items())\n"
      "open(sys.argv[3] + '.tmp', 'wb').write(env)\n"
      "os.rename(sys.argv[3] + '.tmp', sys.argv[3])\n"
      "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid()))\n"
      "os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
      "while not os.path.exists(sys.argv[4]):\n"
      "    time.sleep(0.02)\n");
  const std::string pid_file = (dir / "pid").string();
  const std::string env_file = (dir / "env").string();
  const std::string done_file = (dir / "done").string();
  std::vector<std::string> args = {"--standalone", "--nproc_per_node=1", "--python", python};
  bool forked = false;
  SECTION("forked by the --preload zygote") {
    // The zygote moves the worker's argv and env with prctl(PR_SET_MM_MAP);
    // a kernel without CONFIG_CHECKPOINT_RESTORE, or a seccomp filter, refuses
    // it, and then only what fits the zygote's own areas shows (docs/agent-preload.md).
    const auto probe = run({python, "-c",
                            "import ctypes; size = ctypes.c_uint(0); libc = ctypes.CDLL(None); "
                            "print(libc.prctl(35, 15, ctypes.byref(size), 0, 0) == 0)"},
                           dir.path());
    if (probe.out != "True\n") {
      WARN("SKIP: this kernel refuses prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE): " << probe.out << probe.err);
      return;
    }
    args.insert(args.end(), {"--preload", "json"});
    forked = true;
  }
  SECTION("exec'd (no --preload): what the forked worker must look like") {}
  std::string guard_server = "1";
  SECTION("exec'd under an exec'd guard (DDP_GUARD_SERVER=0)") { guard_server = "0"; }
  args.insert(args.end(), {script, "a b", pid_file, env_file, done_file});
  Process p(ddprun_argv(args), dir.path(), clean_env({{"DDP_GUARD_SERVER", guard_server}}), "ddprun");
  REQUIRE(wait_until([&] { return fs::exists(pid_file) || !p.running(); }, 30s));
  INFO(p.out() << p.err());
  REQUIRE(fs::exists(pid_file));
  const pid_t pid = std::stoi(read_file(pid_file));
  // The line comes through the agent's pipe: it may arrive after the file.
  const std::string line = std::string("forked ") + (forked ? "True" : "False") + " own session True tty 0";
  wait_until([&] { return p.out().find(line) != std::string::npos || !p.running(); }, 30s);
  CHECK_THAT(p.out(), Catch::Contains(line));

  // What a user sees: the exact argv an exec'd worker has, its comm, its environment.
  const std::string cmdline = python + '\0' + "-u" + '\0' + script + '\0' + "a b" + '\0' + pid_file + '\0' +
                              env_file + '\0' + done_file + '\0';
  CHECK(proc_file(pid, "cmdline") == cmdline);
  CHECK(proc_file(pid, "comm") == "python3\n");
  const std::string shown_env = proc_file(pid, "environ");
  CHECK(shown_env == read_file(env_file));
  CHECK_THAT(std::string(1, '\0') + shown_env, Catch::Contains(std::string("\0RANK=0\0", 8)) &&
                                                   Catch::Contains(std::string("\0LOCAL_RANK=0\0", 14)));
  const auto ps = run({ps_tool, "-o", "args=", "-p", std::to_string(pid)}, dir.path());
  CHECK(ps.out == python + " -u " + script + " a b " + pid_file + " " + env_file + " " + done_file + "\n");
  // pgrep -f finds the worker by its script (and ddprun, whose argv has it too).
  const auto pgrep = run({pgrep_tool, "-f", "find_me_train"}, dir.path());
  CHECK(lines_of(pgrep.out).count(std::to_string(pid)) == 1);

  write_file(done_file, "");
  CHECK(p.wait(30s) == 0);
}
