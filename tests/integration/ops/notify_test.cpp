// The unit's ExecStart under a fake systemd: NOTIFY_SOCKET is a datagram
// socket this test reads, WATCHDOG_USEC asks for pings.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "ops_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

class NotifySocket {
 public:
  explicit NotifySocket(const fs::path& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    timeval tv{0, 100 * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifySocket() { ::close(fd_); }

  // Reads datagrams until one contains `needle` or the deadline passes; every
  // message read is kept in messages().
  bool wait_for(const std::string& needle, std::chrono::milliseconds timeout = 10s) {
    for (const auto& m : messages_) {
      if (m.find(needle) != std::string::npos) return true;
    }
    return wait_until(
        [&] {
          char buf[4096];
          const auto n = ::recv(fd_, buf, sizeof buf, 0);
          if (n <= 0) return false;
          messages_.emplace_back(buf, static_cast<std::size_t>(n));
          return messages_.back().find(needle) != std::string::npos;
        },
        timeout);
  }
  std::size_t count(const std::string& needle) const {
    std::size_t n = 0;
    for (const auto& m : messages_) n += m.find(needle) != std::string::npos;
    return n;
  }
  std::string all() const {
    std::string out;
    for (const auto& m : messages_) out += "[" + m + "]\n";
    return out;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  int fd_ = -1;
  std::vector<std::string> messages_;
};

}  // namespace

TEST_CASE("the unit's ExecStart tells systemd READY, STATUS, WATCHDOG and STOPPING", "[ops][notify]") {
  TempDir dir;
  auto argv = unit_exec_start("ddp-rendezvousd.service");
  REQUIRE(argv.size() >= 1);
  REQUIRE(argv[0] == bin("ddp-rendezvousd").string());
  NotifySocket notify(dir / "notify.sock");
  fs::create_directory(dir / "state");
  // The unit's own Environment= lines set data dir and port; the test points
  // them at its temp dir and a free port (same precedence level).
  Process daemon(argv, dir.path(),
                 {{"NOTIFY_SOCKET", notify.path().string()},
                  {"WATCHDOG_USEC", "200000"},
                  {"JOURNAL_STREAM", "8:1234"},
                  {"DDP_RENDEZVOUSD_HOST", "127.0.0.1"},
                  {"DDP_RENDEZVOUSD_PORT", "0"},
                  {"DDP_RENDEZVOUSD_PORT_FILE", (dir / "port").string()},
                  {"DDP_RENDEZVOUSD_DATA_DIR", (dir / "state").string()}},
                 "rendezvousd");

  REQUIRE(notify.wait_for("READY=1"));
  // READY comes after the port file: a unit ordered After= this one can connect.
  CHECK(fs::exists(dir / "port"));
  CHECK(notify.wait_for("STATUS=listening on 127.0.0.1:"));
  CHECK(notify.wait_for("connections=0 keys=0"));

  // Watchdog pings at half of 200 ms: several within a second.
  CHECK(notify.wait_for("WATCHDOG=1", 2s));
  const auto first = notify.count("WATCHDOG=1");
  CHECK(wait_until(
      [&] {
        notify.wait_for("\x01", 100ms);  // never sent: reads whatever arrives for 100 ms
        return notify.count("WATCHDOG=1") >= first + 3;
      },
      3s));

  {
    auto client = store_client(wait_for_port_file(dir / "port"));
    client->set("/ops/a", "1");
    // STATUS refreshes every few seconds with live counts.
    CHECK(notify.wait_for("connections=1 keys=1", 15s));
  }

  daemon.signal(SIGTERM);
  CHECK(notify.wait_for("STOPPING=1"));
  CHECK(daemon.wait(10s) == 0);
  // journald adds its own timestamps: lines start with the logger name.
  INFO(daemon.err());
  CHECK(daemon.err().find("[store.server] [info] listening") == 0);
  INFO(notify.all());
}
