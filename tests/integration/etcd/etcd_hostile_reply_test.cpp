// A member that answers like etcd's gateway but with hostile JSON: each answer
// is one clear error naming the member, never a crash of the client.
#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::TempDir;

namespace {

// Answers every unary call 200 with {"header": <DEPTH nested arrays>}, and a
// watch with one chunk holding {"error": <the same>}. argv: port file, depth.
constexpr const char* kHostileGateway = R"(
import http.server, os, sys
deep = b"[" * int(sys.argv[2]) + b"]" * int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path == "/v3/watch":
            line = b'{"error": ' + deep + b'}\n'
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
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d\n" % s.server_port)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
)";

}  // namespace

TEST_CASE("etcd hostile replies: answers nested 100000 deep are one error naming the member") {
  TempDir dir;
  ddp::test::write_file(dir / "gateway.py", kHostileGateway);
  ddp::test::Process server(
      {"/usr/bin/python3", (dir / "gateway.py").string(), (dir / "port").string(), "100000"}, dir.path());
  const int port = ddp::test::wait_for_port_file(dir / "port");
  REQUIRE(port > 0);
  EtcdStoreOptions o;
  o.endpoints = {ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)}};
  o.connect_timeout = 500ms;
  o.request_timeout = 5s;
  EtcdStore s(o);
  const auto member = "etcd at 127.0.0.1:" + std::to_string(port);
  CHECK_THROWS_AS(s.set("k", "v"), ddp::ProtocolError);
  CHECK_THROWS_WITH(s.set("k", "v"), Contains(member + ": its answer to /v3/kv/put nests 100001 levels deep; "
                                                       "at most 64 are read"));
  // A watch message that deep ends that stream; with no other member, the watch gives up naming why.
  CHECK_THROWS_WITH(
      s.watch("", 0, [](const WatchEvent&) {}),
      Contains(member + " sent a watch message that nests 100001 levels deep; at most 64 are read"));
}
