// Unauthenticated connections (before a HELLO with the right token) must not
// starve authenticated ones of anything: request buffer bytes, connection
// slots, descriptors, or the right token's way in from a busy address.
#include "daemon_fixture.hpp"

using namespace ddp::test;
using namespace ddp::store;
using namespace std::chrono_literals;

namespace {

// The largest frame a client may start before its HELLO (kMaxHelloFrameBytes).
constexpr std::uint32_t kHelloFrameCap = 64 * 1024;

struct TokenDaemon {
  explicit TokenDaemon(std::vector<std::string> extra = {}, int nofile = 0) {
    write_file(dir / "token", "s3cret\n");
    extra.insert(extra.begin(), {"--token-file", (dir / "token").string()});
    d = std::make_unique<Daemon>(dir.path(), extra, "", nofile);
  }
  TempDir dir;
  std::unique_ptr<Daemon> d;
};

std::int64_t connections(RawClient& c) {
  for (const auto& item : c.call(make_request(Op::kStat)).items)
    if (item.key == "connections") return std::stoll(item.value);
  return -1;
}

}  // namespace

TEST_CASE("unauthenticated bytes cannot take the request budget from authenticated clients") {
  // 1300 half-sent HELLO frames of 64 KiB: more than an 80 MiB request budget.
  constexpr int kFlood = 1300;
  if (!raise_nofile(2 * kFlood + 256)) {
    WARN("RLIMIT_NOFILE hard limit below " << 2 * kFlood + 256 << ": skipped");
    return;
  }
  TokenDaemon t({"--max-buffered-request-bytes", std::to_string(80u << 20)});
  auto& d = *t.d;
  auto good = d.client("s3cret");
  const long rss_before = rss_kib(d.proc->pid());
  const auto part = preamble() + le32(kHelloFrameCap) + std::string(kHelloFrameCap - 1, 'h');
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < kFlood; ++i) {
    flood.push_back(std::make_unique<RawClient>(d.port));
    flood.back()->send_bytes(part);
  }
  REQUIRE(wait_until([&] { return unread_bytes_at(d.port) == 0; }, 60s));
  const long grown_mib = (rss_kib(d.proc->pid()) - rss_before) / 1024;
  INFO("daemon RSS grew by " << grown_mib << " MiB under the flood");

  // A 2 MiB set spans many reads, so it is buffered while it arrives.
  good->send(make_request(Op::kSet, {"big"}, {std::string(2 << 20, 'b')}, 0, 0, 9));
  auto set = good->recv(10s);
  REQUIRE(set);
  CHECK(set->status == Status::kOk);
  check_served(*good, "after-flood");
  // The oldest unauthenticated connections went first; the newest are still there.
  CHECK(flood.front()->closed_by_peer(2s));
  CHECK_FALSE(flood.back()->closed_by_peer(200ms));
  CHECK_THAT(d.proc->err(), Catch::Contains("unauthenticated"));
#if !defined(DDP_TEST_ASAN) && !defined(DDP_TEST_TSAN)
  CHECK(grown_mib < 48);
#endif
}

TEST_CASE("at --max-connections the oldest unauthenticated connection makes room for a new client") {
  TokenDaemon t({"--max-connections", "20"});
  auto& d = *t.d;
  auto good = d.client("s3cret");
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 19; ++i) silent.push_back(std::make_unique<RawClient>(d.port));
  REQUIRE(wait_until([&] { return connections(*good) == 20; }));
  RawClient late(d.port);
  CHECK(try_handshake(late, "s3cret") == Status::kOk);
  CHECK(silent.front()->closed_by_peer(2s));
  check_served(*good, "slots");
  check_served(late, "late");

  // Authenticated connections are never closed to make room: a newcomer is.
  std::vector<std::unique_ptr<RawClient>> authed;
  for (std::size_t i = 1; i < silent.size(); ++i) {
    auto c = std::make_unique<RawClient>(d.port);
    if (try_handshake(*c, "s3cret") == Status::kOk) authed.push_back(std::move(c));
  }
  REQUIRE(wait_until([&] { return connections(*good) == 20; }));
  RawClient extra(d.port);
  CHECK(extra.closed_by_peer());
  check_served(*good, "full");
  CHECK_THAT(d.proc->err(), Catch::Contains("max_connections=20 reached"));
}

TEST_CASE("out of descriptors, the oldest unauthenticated connection makes room for a new client") {
#ifdef DDP_TEST_ASAN
  // UBSan (built with ASan here) checks a vptr by probing memory through a
  // pipe; in a process out of descriptors that fails and it reports a false
  // "invalid vptr" at the first virtual call.
  WARN("skipped in the sanitized build: UBSan needs a free descriptor");
  return;
#endif
  // --max-connections set above what 64 descriptors allow: the daemon keeps
  // the operator's value, so accept() itself runs out (EMFILE).
  TokenDaemon t({"--max-connections", "1000", "--idle-frame-timeout-ms", "60000"}, 64);
  auto& d = *t.d;
  auto good = d.client("s3cret");
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 80; ++i) silent.push_back(std::make_unique<RawClient>(d.port));
  RawClient late(d.port);
  CHECK(try_handshake(late, "s3cret", 5s) == Status::kOk);
  CHECK(silent.front()->closed_by_peer(2s));
  check_served(*good, "emfile");
  check_served(late, "late");
}

TEST_CASE("the right token gets in at once from an address that is backing off") {
  TokenDaemon t;
  auto& d = *t.d;
  // Past the 3 free failures, 127.0.0.1 must wait before its next answer:
  // after 8 failures (held 100, 200, 400, 800 and 1,600 ms), 3.2 s.
  for (int i = 0; i < 8; ++i) {
    RawClient guess(d.port);
    CHECK(try_handshake(guess, "guess" + std::to_string(i), 10s) == Status::kAuthFailed);
  }
  const auto t0 = std::chrono::steady_clock::now();
  RawClient right(d.port);
  CHECK(try_handshake(right, "s3cret") == Status::kOk);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  check_served(right, "right-token");
  // Wrong tokens from the address are still slowed down.
  RawClient wrong(d.port);
  wrong.send_preamble();
  wrong.send(make_request(Op::kHello, {}, {"guess"}, kProtocolVersion, 0, 1));
  auto r = wrong.recv(10s);
  REQUIRE(r);
  CHECK(r->status == Status::kAuthFailed);
  CHECK_THAT(r->message, Catch::Contains("too many failed authentication attempts"));
}
