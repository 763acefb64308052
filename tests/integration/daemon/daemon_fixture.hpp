// Starts the real ddp-rendezvousd on 127.0.0.1 with --port 0 in a temp dir and
// reads its port from --port-file. With `failpoints`, the test build
// ddp-rendezvousd-failpoints runs instead, with them in $DDP_FAILPOINTS; with
// `nofile`, under prlimit with that RLIMIT_NOFILE (soft and hard). Plus the
// byte and /proc helpers the daemon tests share.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "raw_client.hpp"
#include "test_support.hpp"

// Sanitized builds: RSS figures mean nothing there (ASan's quarantine, TSan's
// shadow memory), and loads run slower.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DDP_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define DDP_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DDP_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define DDP_TEST_TSAN 1
#endif

namespace ddp::test {

struct Daemon {
  Daemon(const fs::path& dir, std::vector<std::string> extra = {}, const std::string& failpoints = {},
         int nofile = 0)
      : dir_(dir) {
    std::error_code ec;
    fs::remove(dir / "port", ec);
    const auto binary = failpoints.empty() ? "ddp-rendezvousd" : "ddp-rendezvousd-failpoints";
    std::vector<std::string> argv = {
        bin(binary).string(),    "--host",      "127.0.0.1", "--port", "0", "--port-file",
        (dir / "port").string(), "--log-level", "debug"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (nofile > 0)
      argv.insert(argv.begin(), {"/usr/bin/prlimit", "--nofile=" + std::to_string(nofile), "--"});
    std::map<std::string, std::optional<std::string>> env;
    if (!failpoints.empty()) env["DDP_FAILPOINTS"] = failpoints;
    proc = std::make_unique<Process>(argv, dir, env, "rdzvd");
    port = wait_for_port_file(dir / "port");
    INFO("daemon stderr: " << proc->err());
    REQUIRE(port > 0);
  }

  // A connection that completed the handshake.
  std::unique_ptr<RawClient> client(const std::string& token = {}) const {
    auto c = std::make_unique<RawClient>(port);
    REQUIRE(c->handshake(token) == store::Status::kOk);
    return c;
  }

  fs::path dir_;
  std::unique_ptr<Process> proc;
  int port = -1;
};

// The daemon of a test case that needs no flags: TEST_CASE_METHOD(DaemonInTempDir, ...)
// starts it in a temp dir of its own, as `d` in `dir`.
struct DaemonInTempDir {
  TempDir dir;
  Daemon d{dir.path()};
};

// Little-endian u32, as frame lengths are written.
std::string le32(std::uint32_t v);
// The native protocol's 4-byte preamble.
std::string preamble();
// VmRSS of `pid` in KiB, from /proc/<pid>/status; -1 when unreadable.
long rss_kib(pid_t pid);
// Bytes received but not yet read by the process that owns the established
// TCP sockets bound to 127.0.0.1:<port> (rx_queue in /proc/net/tcp): 0 once the
// daemon has read everything clients sent it.
std::size_t unread_bytes_at(int port);
// Preamble and HELLO; the HELLO's status, or nullopt when the connection
// closed or nothing came within `timeout`.
std::optional<store::Status> try_handshake(RawClient& c, const std::string& token,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(5));
// Raises this process's RLIMIT_NOFILE soft limit to `want` (at most the hard
// limit; children inherit it); false when the hard limit is lower.
bool raise_nofile(std::size_t want);

// The well-behaved connection keeps being served: a set and a get round-trip.
inline void check_served(RawClient& c, const std::string& tag) {
  auto set = c.call(make_request(store::Op::kSet, {"alive/" + tag}, {tag}));
  REQUIRE(set.status == store::Status::kOk);
  auto get = c.call(make_request(store::Op::kTryGet, {"alive/" + tag}));
  REQUIRE(get.status == store::Status::kOk);
  REQUIRE(get.items.size() == 1);
  CHECK(get.items[0].value == tag);
}

}  // namespace ddp::test
