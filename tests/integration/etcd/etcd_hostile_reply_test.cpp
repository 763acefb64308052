// A member that answers like etcd's gateway but with hostile JSON: each answer
// is one clear error naming the member, never a crash of the client.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"
#include "fake_http_member.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::TempDir;

namespace {

// Answers every unary call 200 with {"header": <DEPTH nested arrays>}, and a
// watch with one chunk holding the line in file WATCH_LINE, else
// {"error": <DEPTH nested arrays>}. argv: port file, depth[, watch line file].
constexpr const char* kHostileGateway = R"(
import http.server, os, sys
deep = b"[" * int(sys.argv[2]) + b"]" * int(sys.argv[2])
watch_line = open(sys.argv[3], "rb").read() if len(sys.argv) > 3 else b'{"error": ' + deep + b'}'

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path == "/v3/watch":
            line = watch_line + b'\n'
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(line), line))
            return
        body = b'{"header": ' + deep + b'}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
)";

// The hostile gateway, and a store whose only member it is.
struct Hostile {
  explicit Hostile(const TempDir& dir, std::vector<std::string> args) {
    server = std::make_unique<ddp::test::FakeHttpMember>(dir, kHostileGateway, args);
    const int port = server->port;
    member = "etcd at 127.0.0.1:" + std::to_string(port);
    EtcdStoreOptions o;
    o.endpoints = {ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)}};
    o.connect_timeout = 500ms;
    o.request_timeout = 5s;
    store = std::make_unique<EtcdStore>(o);
  }
  std::unique_ptr<ddp::test::FakeHttpMember> server;
  std::string member;
  std::unique_ptr<EtcdStore> store;
};

}  // namespace

TEST_CASE("etcd hostile replies: answers nested 100000 deep are one error naming the member") {
  TempDir dir;
  Hostile h(dir, {"100000"});
  auto& s = *h.store;
  const auto& member = h.member;
  CHECK_THROWS_AS(s.set("k", "v"), ddp::ProtocolError);
  CHECK_THROWS_WITH(s.set("k", "v"), Contains(member + ": its answer to /v3/kv/put nests 100001 levels deep; "
                                                       "at most 64 are read"));
  // A watch message that deep ends that stream; with no other member, the watch gives up naming why.
  CHECK_THROWS_WITH(
      s.watch("", 0, [](const WatchEvent&) {}),
      Contains(member + " sent a watch message that nests 100001 levels deep; at most 64 are read"));
}

TEST_CASE("etcd hostile replies: a watch message of the wrong shape is an error naming the member") {
  // Each of these threw nlohmann's exceptions out of the watch thread, which ended the process.
  for (const std::string line : {R"({"result": {"events": [{}]}})", R"({"result": {"events": 7}})",
                                 R"({"result": {"created": "yes"}})",
                                 R"({"result": {"header": {"revision": 1e300}, "created": true}})"}) {
    INFO(line);
    TempDir dir;
    ddp::test::write_file(dir / "watch_line", line);
    Hostile h(dir, {"1", (dir / "watch_line").string()});
    CHECK_THROWS_WITH(h.store->watch("", 0, [](const WatchEvent&) {}),
                      Contains(h.member + " sent a malformed watch message"));
  }
  // Fields that only inform are read when they have their type, else ignored: the watch ends as it would.
  for (const std::string line : {R"({"result": {"canceled": true, "cancel_reason": 1}})",
                                 R"({"result": {"events": [{"type": 1, "kv": {"key": "YQ=="}}]}})"}) {
    INFO(line);
    TempDir dir;
    ddp::test::write_file(dir / "watch_line", line);
    Hostile h(dir, {"1", (dir / "watch_line").string()});
    CHECK_THROWS_AS(h.store->watch("", 0, [](const WatchEvent&) {}), ddp::Error);
  }
}
