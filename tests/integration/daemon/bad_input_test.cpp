// Hostile and broken clients: each loses only its own connection, and a second,
// well-behaved connection keeps being served.
#include "daemon_fixture.hpp"

using namespace ddp::test;
using namespace ddp::store;
using namespace std::chrono_literals;

TEST_CASE_METHOD(DaemonInTempDir, "garbage bytes close only that connection") {
  auto good = d.client();
  RawClient bad(d.port);
  bad.send_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(bad.closed_by_peer());
  RawClient bad2(d.port);
  bad2.send_bytes(preamble() + le32(5) + std::string("\xff\xff\xff\xff\xff", 5));  // unknown op
  CHECK(bad2.closed_by_peer());
  check_served(*good, "garbage");
  CHECK_THAT(d.proc->err(), Catch::Contains("malformed frame"));
}

TEST_CASE_METHOD(
    DaemonInTempDir,
    "requests before a malformed frame in the same read are answered, then the connection closes") {
  auto c = d.client();
  std::string burst;
  encode_request(make_request(Op::kSet, {"k"}, {"v"}, 0, 0, 1), burst);
  encode_request(make_request(Op::kTryGet, {"k"}, {}, 0, 0, 2), burst);
  burst += le32(5) + std::string("\xff\xff\xff\xff\xff", 5);  // unknown op
  c->send_bytes(burst);
  auto set = c->recv(5s);
  REQUIRE(set);
  CHECK(set->id == 1);
  CHECK(set->status == Status::kOk);
  auto get = c->recv(5s);
  REQUIRE(get);
  CHECK(get->id == 2);
  REQUIRE(get->items.size() == 1);
  CHECK(get->items[0].value == "v");
  CHECK(c->closed_by_peer());
  CHECK_THAT(d.proc->err(), Catch::Contains("malformed frame"));
}

TEST_CASE_METHOD(DaemonInTempDir, "a client that half-closes after a request still gets the whole reply") {
  auto c = d.client();
  const std::string big(8 << 20, 'b');  // more than the socket buffers hold
  REQUIRE(c->call(make_request(Op::kSet, {"big"}, {big})).status == Status::kOk);
  c->send(make_request(Op::kTryGet, {"big"}, {}, 0, 0, 7));
  c->shutdown_write();
  auto get = c->recv(10s);
  REQUIRE(get);
  CHECK(get->id == 7);
  REQUIRE(get->items.size() == 1);
  CHECK(get->items[0].value.size() == big.size());
  CHECK(c->closed_by_peer());
}

TEST_CASE_METHOD(DaemonInTempDir,
                 "an absurd frame length closes the connection before anything is allocated") {
  auto good = d.client();
  auto bad = d.client();
  bad->send_bytes(le32(0xFFFFFFFFu));
  CHECK(bad->closed_by_peer());
  check_served(*good, "absurd");
  CHECK_THAT(d.proc->err(), Catch::Contains("exceeds max_frame_bytes"));
}

TEST_CASE_METHOD(DaemonInTempDir,
                 "a truncated frame body and a frame with lying counts close the connection") {
  auto good = d.client();
  // A frame whose body says 1,000,000 keys in 30 bytes.
  std::string body;
  body += static_cast<char>(Op::kSet);
  body += le32(1) + std::string(16, '\0') + le32(1000000) + std::string(5, 'k');
  auto bad = d.client();
  bad->send_bytes(le32(static_cast<std::uint32_t>(body.size())) + body);
  CHECK(bad->closed_by_peer());
  check_served(*good, "lying");
  CHECK_THAT(d.proc->err(), Catch::Contains("op set"));
}

TEST_CASE("a client that stalls mid-frame or never says hello is closed after the idle timeout") {
  TempDir dir;
  write_file(dir / "token", "s3cret\n");
  Daemon d(dir.path(), {"--idle-frame-timeout-ms", "300", "--token-file", (dir / "token").string()});
  auto good = d.client("s3cret");
  auto stalled = d.client("s3cret");
  stalled->send_bytes(le32(100) + "only a few bytes");
  RawClient silent(d.port);  // connects, sends nothing
  RawClient half(d.port);
  half.send_bytes(preamble().substr(0, 2));
  CHECK(stalled->closed_by_peer(5s));
  CHECK(silent.closed_by_peer(5s));
  CHECK(half.closed_by_peer(5s));
  // The good client was idle between frames all along and is still served.
  check_served(*good, "stall");
  CHECK_THAT(d.proc->err(), Catch::Contains("stalled mid-frame"));
  CHECK_THAT(d.proc->err(), Catch::Contains("no hello"));
}

TEST_CASE("a silent connection stays open on a server that serves torch clients") {
  // torch 1.x opens a second connection per store that never sends a byte and
  // busy-loops if the server closes it; without a token the server keeps it.
  TempDir dir;
  Daemon d(dir.path(), {"--idle-frame-timeout-ms", "200"});
  RawClient silent(d.port);
  RawClient half(d.port);
  half.send_bytes(preamble().substr(0, 2));
  CHECK(half.closed_by_peer(5s));
  CHECK_FALSE(silent.closed_by_peer(400ms));
}

TEST_CASE("wrong or missing token fails auth and closes, the right one is served") {
  TempDir dir;
  write_file(dir / "token", "s3cret\n");
  Daemon d(dir.path(), {"--token-file", (dir / "token").string()});
  auto good = d.client("s3cret");
  RawClient wrong(d.port);
  CHECK(wrong.handshake("guess") == Status::kAuthFailed);
  CHECK(wrong.closed_by_peer());
  RawClient missing(d.port);
  CHECK(missing.handshake() == Status::kAuthFailed);
  CHECK(missing.closed_by_peer());
  RawClient skipper(d.port);
  skipper.send_preamble();
  skipper.send(make_request(Op::kSet, {"k"}, {"v"}, 0, 0, 1));  // no hello first
  CHECK(skipper.closed_by_peer());
  check_served(*good, "auth");
  CHECK(good->call(make_request(Op::kTryGet, {"k"})).status == Status::kNotFound);
  CHECK_THAT(d.proc->err(), Catch::Contains("authentication failed"));
}

TEST_CASE("a burst of wrong tokens is logged once, then summarised, and the address is slowed down") {
  TempDir dir;
  write_file(dir / "token", "s3cret\n");
  Daemon d(dir.path(), {"--token-file", (dir / "token").string()});
  auto good = d.client("s3cret");  // connected before the burst: unaffected
  // 20 guesses at once: past the 3 free ones each answer is held longer
  // (100 ms doubling to 4 s), the last ones the longest.
  std::vector<std::unique_ptr<RawClient>> guesses;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    guesses.push_back(std::make_unique<RawClient>(d.port));
    guesses.back()->send_preamble();
    guesses.back()->send(make_request(Op::kHello, {}, {"guess" + std::to_string(i)}, kProtocolVersion, 0, 1));
  }
  int held = 0;
  for (auto& guess : guesses) {
    auto r = guess->recv();
    REQUIRE(r);
    CHECK(r->status == Status::kAuthFailed);
    if (r->message.find("too many failed authentication attempts") != std::string::npos) ++held;
  }
  CHECK(held >= 15);
  CHECK(std::chrono::steady_clock::now() - t0 >= 3s);
  check_served(*good, "burst");
  const auto err = d.proc->err();
  std::size_t lines = 0;
  for (auto p = err.find("authentication failed peer="); p != std::string::npos;
       p = err.find("authentication failed peer=", p + 1))
    ++lines;
  CHECK(lines == 1);
  CHECK_THAT(err, Catch::Contains("further failures are summarised"));
}

TEST_CASE_METHOD(DaemonInTempDir, "a protocol version mismatch is answered and closed") {
  RawClient c(d.port);
  c.send_preamble();
  auto resp = c.call(make_request(Op::kHello, {}, {""}, 999));
  CHECK(resp.status == Status::kVersionMismatch);
  CHECK_THAT(resp.message, Catch::Contains("version 1"));
  CHECK(c.closed_by_peer());
}

TEST_CASE_METHOD(DaemonInTempDir,
                 "clients vanishing mid-wait and mid-watch leave the server serving others") {
  auto good = d.client();
  for (int i = 0; i < 5; ++i) {
    auto gone = d.client();
    gone->send(make_request(Op::kGet, {"later"}, {}, 0, -1, 1));
    REQUIRE(gone->call(make_request(Op::kWatch, {""}, {}, 0, 0, 2)).status == Status::kOk);
  }  // each closes here with a blocked get and a watch
  REQUIRE(ddp::test::wait_until([&] {
    auto stat = good->call(make_request(Op::kStat));
    for (const auto& item : stat.items)
      if (item.key == "connections") return item.value == "1";
    return false;
  }));
  auto stat = good->call(make_request(Op::kStat));
  for (const auto& item : stat.items) {
    if (item.key == "waiters" || item.key == "watches") CHECK(item.value == "0");
  }
  CHECK(good->call(make_request(Op::kSet, {"later"}, {"now"})).status == Status::kOk);
  check_served(*good, "vanish");
}

TEST_CASE_METHOD(DaemonInTempDir,
                 "pending gets beyond the per-connection limit are refused, the connection stays") {
  auto c = d.client();
  const std::uint32_t limit = Limits{}.max_pending_per_connection;
  std::string burst;
  for (std::uint32_t i = 1; i <= limit + 1; ++i)
    encode_request(make_request(Op::kGet, {"never"}, {}, 0, -1, i), burst);
  c->send_bytes(burst);
  auto resp = c->recv();
  REQUIRE(resp);
  CHECK(resp->id == limit + 1);
  CHECK(resp->status == Status::kLimitExceeded);
  check_served(*c, "pending");
}

TEST_CASE("connections beyond --max-connections are refused") {
  TempDir dir;
  Daemon d(dir.path(), {"--max-connections", "2"});
  auto a = d.client();
  auto b = d.client();
  RawClient extra(d.port);
  CHECK(extra.closed_by_peer());
  check_served(*a, "maxconn");
  CHECK_THAT(d.proc->err(), Catch::Contains("max_connections=2 reached"));
}
