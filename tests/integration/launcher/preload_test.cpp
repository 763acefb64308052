// --preload without torch (a stdlib module): the real ddprun and its zygote,
// and a stranger on the zygote's socket. torch's own runs are in
// tests/integration/torch/preload_test.cpp.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

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
