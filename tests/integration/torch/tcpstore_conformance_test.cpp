// Byte-level conformance of the TCPStore dialect against the real
// ddp-rendezvousd: every op of each generation as its client writes it, and
// the exact reply bytes its client reads. Raw sockets, no torch needed (the
// torch-labelled tests drive a real torch 1.13 client); real torch 2.0.1,
// 2.1.2, 2.2.2 and 2.15.0 clients' bytes are replayed from their captures
// (tests/unit/server/torch_captures/).
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>

#include "raw_tcpstore.hpp"
#include "test_support.hpp"
#include "torch_capture.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

const std::string kValidate("\x00\xCE\xF7\x85\x3C", 5);

// Plays a capture's client side against the daemon on `port`: opens each
// connection when the capture does, sends what the client sent, reads as many
// bytes as torch's server answered and compares them. "" when all matched,
// else the capture line, the request and both replies.
std::string replay(const std::string& capture, int port) {
  std::map<int, std::unique_ptr<RawConn>> conns;
  std::map<int, std::string> last_sent;
  for (const auto& e : load_capture(capture)) {
    const auto where = capture + ":" + std::to_string(e.line) + ": ";
    switch (e.kind) {
      case CaptureEvent::Kind::kOpen:
        conns[e.conn] = std::make_unique<RawConn>(port, 10s);
        break;
      case CaptureEvent::Kind::kSend:
        conns.at(e.conn)->send(e.bytes);
        last_sent[e.conn] = e.note;
        break;
      case CaptureEvent::Kind::kReply: {
        const auto got = conns.at(e.conn)->recv_exact(e.bytes.size());
        const bool same = e.unordered ? sorted_list_reply(got) == sorted_list_reply(e.bytes) : got == e.bytes;
        if (!same) {
          return where + "reply to" + last_sent[e.conn] + ": torch's server sent " + to_hex(e.bytes) +
                 ", the daemon " + (got.empty() ? "nothing (or closed)" : to_hex(got));
        }
        break;
      }
      case CaptureEvent::Kind::kClose:
        conns.erase(e.conn);
        break;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("real torch 2.0.1, 2.1.2, 2.2.2 and 2.15.0 clients get torch's own replies from the daemon") {
  // Each capture on a fresh daemon told the clients' torch version; 2.2+ needs
  // no setting. The replies must be torch's own server's, byte for byte.
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"torch-2.0.1-store-methods.txt", {"--torch-legacy-protocol", "2.0"}},
      {"torch-2.0.1-store-methods.txt", {}},  // the default, 1, is the same numbering
      {"torch-2.0.1-init-process-group.txt", {"--torch-legacy-protocol", "2.0"}},
      {"torch-2.1.2-store-methods.txt", {"--torch-legacy-protocol", "2.1"}},
      {"torch-2.1.2-init-process-group.txt", {"--torch-legacy-protocol", "2.1"}},
      {"torch-2.2.2-store-methods.txt", {}},
      {"torch-2.2.2-init-process-group.txt", {"--torch-legacy-protocol", "2.1"}},
      {"torch-2.15.0-no-libuv-store-methods.txt", {}},
  };
  for (const auto& [capture, flags] : runs) {
    INFO(capture << (flags.empty() ? " (no flag)" : " --torch-legacy-protocol " + flags[1]));
    TcpStoreDaemon d(flags);
    CHECK(replay(capture, d.port) == "");
  }
}

TEST_CASE("torch 2.1.2's DELETE_KEY on a daemon left at torch 1.x/2.0 closes the connection naming the fix") {
  TcpStoreDaemon d;  // the default: 1 (torch 1.x and 2.0)
  const auto result = replay("torch-2.1.2-store-methods.txt", d.port);
  CHECK_THAT(result,
             Catch::Contains("reply to DELETE_KEY \"/fresh\"") && Catch::Contains("nothing (or closed)"));
  CHECK(
      d.logs("if this is a torch 2.1 client's DELETE_KEY, torch 2.1 clients need "
             "torch_legacy_protocol=2.1"));
}

TEST_CASE("torch 2.x: every op answers the bytes its client reads") {
  TcpStoreDaemon d;
  RawConn c(d.port, 10s);
  c.send(kValidate + op(13) + u32(0xBEEF));  // VALIDATE (no reply), PING
  CHECK(c.recv_exact(4) == u32(0xBEEF));
  c.send(op(1) + str("/k") + str("v1"));  // SET: no reply
  c.send(op(6) + u64(1) + str("/k"));     // WAIT: STOP_WAITING
  CHECK(c.recv_exact(1) == op(0));
  c.send(op(3) + str("/k"));  // GET
  CHECK(c.recv_exact(10) == str("v1"));
  c.send(op(2) + str("/k") + str("v1") + str("v2"));  // COMPARE_SET swaps
  CHECK(c.recv_exact(10) == str("v2"));
  c.send(op(2) + str("/missing") + str("x") + str("y"));  // missing key, non-empty expected: returns expected
  CHECK(c.recv_exact(9) == str("x"));
  c.send(op(2) + str("/new") + str("") + str("z"));  // missing key, empty expected: creates
  CHECK(c.recv_exact(9) == str("z"));
  c.send(op(4) + str("/n") + u64(5));  // ADD
  CHECK(c.recv_exact(8) == u64(5));
  c.send(op(4) + str("/n") + u64(static_cast<std::uint64_t>(-2)));
  CHECK(c.recv_exact(8) == u64(3));
  c.send(op(5) + u64(2) + str("/k") + str("/nope"));  // CHECK: NOT_READY
  CHECK(c.recv_exact(1) == op(1));
  c.send(op(5) + u64(2) + str("/k") + str("/n"));  // CHECK: READY
  CHECK(c.recv_exact(1) == op(0));
  c.send(op(7));  // GETNUMKEYS: /k /new /n
  CHECK(c.recv_exact(8) == u64(3));
  c.send(op(9) + str("/k") + str("+tail"));                                // APPEND: no reply
  c.send(op(11) + u64(2) + str("/a") + str("1") + str("/b") + str("22"));  // MULTI_SET: no reply
  c.send(op(10) + u64(3) + str("/k") + str("/a") + str("/b"));             // MULTI_GET
  CHECK(c.recv_exact(8 + 7 + 8 + 1 + 8 + 2) == str("v2+tail") + str("1") + str("22"));
  c.send(op(8) + str("/a"));  // DELETE_KEY: number deleted
  CHECK(c.recv_exact(8) == u64(1));
  c.send(op(8) + str("/a"));
  CHECK(c.recv_exact(8) == u64(0));
  c.send(op(17));  // LIST: count, then every key (sorted here)
  CHECK(c.recv_exact(8 + 10 + 10 + 10 + 12) == u64(4) + str("/b") + str("/k") + str("/n") + str("/new"));
  c.send(op(6) + u64(1) + str("/never") + op(12));  // a WAIT, then CANCEL_WAIT: only WAIT_CANCELED
  CHECK(c.recv_exact(1) == op(1));
  c.send(op(13) + u32(7));  // and the connection goes on
  CHECK(c.recv_exact(4) == u32(7));
}

TEST_CASE("torch 2.x queues: push, length, pop in order, and an empty pop") {
  TcpStoreDaemon d;
  RawConn c(d.port, 10s);
  c.send(kValidate);
  c.send(op(14) + str("/q") + str("first") + op(14) + str("/q") + str("second"));  // QUEUE_PUSH: no reply
  c.send(op(16) + str("/q"));                                                      // QUEUE_LEN
  CHECK(c.recv_exact(8) == u64(2));
  c.send(op(5) + u64(1) + str("/q"));  // CHECK counts a non-empty queue as present
  CHECK(c.recv_exact(1) == op(0));
  c.send(op(15) + str("/q"));  // QUEUE_POP: the length before the pop, then the value
  CHECK(c.recv_exact(8 + 8 + 5) == u64(2) + str("first"));
  c.send(op(15) + str("/q"));
  CHECK(c.recv_exact(8 + 8 + 6) == u64(1) + str("second"));
  c.send(op(15) + str("/q"));  // empty: just 0
  CHECK(c.recv_exact(8) == u64(0));
  c.send(op(16) + str("/q"));
  CHECK(c.recv_exact(8) == u64(0));
  c.send(op(7));  // queues are not keys
  CHECK(c.recv_exact(8) == u64(0));
}

TEST_CASE("torch 2.x blocking pop: each push wakes one waiter, the longest waiting first") {
  TcpStoreDaemon d;
  RawConn first(d.port, 10s);
  RawConn second(d.port, 10s);
  RawConn pusher(d.port, 10s);
  for (RawConn* c : {&first, &second, &pusher}) c->send(kValidate);
  // A blocking pop is WAIT on the queue's name. The PING after it comes back
  // once the server has parked the WAIT, which orders the two waiters.
  first.send(op(6) + u64(1) + str("/jobs") + op(13) + u32(1));
  CHECK(first.recv_exact(4) == u32(1));
  second.send(op(6) + u64(1) + str("/jobs") + op(13) + u32(2));
  CHECK(second.recv_exact(4) == u32(2));

  pusher.send(op(14) + str("/jobs") + str("a") + op(16) + str("/jobs"));
  CHECK(pusher.recv_exact(8) == u64(1));
  CHECK(first.recv_exact(1) == op(0));  // STOP_WAITING for the first only
  pusher.send(op(13) + u32(3));         // a round trip: the server is past the push
  CHECK(pusher.recv_exact(4) == u32(3));
  CHECK(second.nothing_pending());

  first.send(op(15) + str("/jobs"));
  CHECK(first.recv_exact(8 + 8 + 1) == u64(1) + str("a"));
  pusher.send(op(14) + str("/jobs") + str("b"));
  CHECK(second.recv_exact(1) == op(0));
  second.send(op(15) + str("/jobs"));
  CHECK(second.recv_exact(8 + 8 + 1) == u64(1) + str("b"));
}

TEST_CASE("torch 1.x: every op answers the bytes its client reads") {
  TcpStoreDaemon d;
  RawConn c(d.port, 10s);
  c.send(op(0) + str("/k") + str("v"));  // SET: no reply
  c.send(op(5) + u64(1) + str("/k"));    // WAIT
  CHECK(c.recv_exact(1) == op(0));
  c.send(op(2) + str("/k"));  // GET
  CHECK(c.recv_exact(9) == str("v"));
  c.send(op(1) + str("/k") + str("v") + str("w"));  // COMPARE_SET
  CHECK(c.recv_exact(9) == str("w"));
  c.send(op(3) + str("/n") + u64(2));  // ADD
  CHECK(c.recv_exact(8) == u64(2));
  c.send(op(4) + u64(1) + str("/x"));  // CHECK: NOT_READY
  CHECK(c.recv_exact(1) == op(1));
  c.send(op(6));  // GETNUMKEYS
  CHECK(c.recv_exact(8) == u64(2));
  c.send(op(8) + str("/k"));  // DELETE_KEY
  CHECK(c.recv_exact(8) == u64(1));
}

TEST_CASE("torch 2.1's numbering is served when the daemon is told so, and refused otherwise") {
  {
    TcpStoreDaemon d({"--torch-legacy-protocol", "2.1"});
    RawConn c(d.port, 10s);
    c.send(op(0) + str("/k") + str("v"));   // SET
    c.send(op(8) + str("/k") + str("++"));  // APPEND (8 in 2.1)
    c.send(op(9) + u64(1) + str("/k"));     // MULTI_GET
    CHECK(c.recv_exact(8 + 3) == str("v++"));
    c.send(op(10) + u64(1) + str("/m") + str("1"));  // MULTI_SET
    c.send(op(6));                                   // GETNUMKEYS
    CHECK(c.recv_exact(8) == u64(2));
    c.send(op(7) + str("/k"));  // DELETE_KEY at 7
    CHECK(c.recv_exact(8) == u64(1));
    c.send(op(5) + u64(1) + str("/never") + op(11));  // WAIT, CANCEL_WAIT
    CHECK(c.recv_exact(1) == op(1));
  }
  for (const auto& flags :
       {std::vector<std::string>{}, std::vector<std::string>{"--torch-legacy-protocol", "2.0"}}) {
    TcpStoreDaemon d(flags);  // 1.x and 2.0 numbering, where 7 is WATCH_KEY
    RawConn c(d.port, 10s);
    c.send(op(7) + str("/k"));
    CHECK(c.closed_by_peer());
    CHECK(d.logs("WATCH_KEY"));
    RawConn multi_get(d.port, 10s);  // 9..11: 2.1's MULTI_GET, MULTI_SET, CANCEL_WAIT
    multi_get.send(op(9) + u64(1) + str("/k"));
    CHECK(multi_get.closed_by_peer());
    CHECK(
        d.logs("unknown query type 9 (0x09) for torch-tcpstore-v1 (torch 2.1 clients need "
               "torch_legacy_protocol=2.1)"));
  }
}

TEST_CASE(
    "an op the configured dialect does not know closes that connection with one log line naming the byte and "
    "the peer") {
  TcpStoreDaemon d({"--torch-legacy-protocol", "2.1"});
  RawConn other(d.port, 10s);
  other.send(op(3) + str("/n") + u64(1));  // ADD in 2.1 numbering
  CHECK(other.recv_exact(8) == u64(1));

  RawConn bad(d.port, 10s);
  bad.send(op(6));  // GETNUMKEYS: a 2.1 client, so far
  CHECK(bad.recv_exact(8) == u64(1));
  bad.send(op(12) + str("/x"));  // 12: past 2.1's CANCEL_WAIT (11)
  CHECK(bad.closed_by_peer());
  CHECK(d.logs("query type 12 (0x0c)"));
  const auto log = d.proc->err();
  const auto at = log.find("query type 12 (0x0c)");
  const auto line_start = log.rfind('\n', at) + 1;
  const auto line = log.substr(line_start, log.find('\n', at) - line_start);
  CHECK_THAT(line, Catch::Contains("peer=127.0.0.1:") && Catch::Contains("torch-tcpstore-v2-early"));

  other.send(op(3) + str("/n") + u64(1));  // the other connection is unaffected
  CHECK(other.recv_exact(8) == u64(2));
  RawConn v2(d.port, 10s);  // and 2.2+ clients are recognised whatever the setting
  v2.send(kValidate + op(16) + str("/q"));
  CHECK(v2.recv_exact(8) == u64(0));
}

TEST_CASE(
    "a --torch-legacy-protocol naming no torch version it knows is one usage error line naming the flag") {
  // 2.2 and later open with VALIDATE: there is nothing to set for them.
  for (const std::string bad : {"3", "2.2", "2", "1.13"}) {
    INFO(bad);
    TempDir dir;
    auto r =
        run({bin("ddp-rendezvousd").string(), "--port", "0", "--torch-legacy-protocol", bad}, dir.path());
    CHECK(r.code == 2);
    const auto text = r.out + r.err;
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
    CHECK_THAT(text, Catch::Contains("--torch-legacy-protocol: '" + bad + "' is not a torch version") &&
                         Catch::Contains("use 1 (torch 1.x), 2.0 or 2.1"));
  }
  TempDir dir;  // the environment variable is checked the same way
  auto r = run({bin("ddp-rendezvousd").string(), "--port", "0"}, dir.path(),
               {{"DDP_RENDEZVOUSD_TORCH_LEGACY_PROTOCOL", "2.0-2.1"}});
  CHECK(r.code == 2);
  CHECK_THAT(r.out + r.err, Catch::Contains("DDP_RENDEZVOUSD_TORCH_LEGACY_PROTOCOL: '2.0-2.1'"));
}
