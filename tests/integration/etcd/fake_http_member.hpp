// A stand-in etcd member for the tests of what the client makes of a server
// that is no good etcd: a Python http.server on 127.0.0.1 (port 0) running the
// request handler class H that the test writes; the port comes back in a file.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test {

// What follows the test's handler: serve H on a free port, each request on a
// thread of its own, and publish the port in argv[1] (written under another
// name, then renamed, so the test never reads half of it).
inline constexpr const char* kServeHandler = R"(
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d\n" % s.server_port)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
)";

struct FakeHttpMember {
  // `handler`: Python that imports http.server, os and sys and defines class H;
  // `args`: its argv[2..]. Returns once the server listens.
  FakeHttpMember(const TempDir& dir, const std::string& handler, const std::vector<std::string>& args) {
    write_file(dir / "member.py", handler + kServeHandler);
    std::vector<std::string> argv{"/usr/bin/python3", (dir / "member.py").string(), (dir / "port").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    proc = std::make_unique<Process>(argv, dir.path());
    port = wait_for_port_file(dir / "port");
    REQUIRE(port > 0);
  }
  std::unique_ptr<Process> proc;
  int port = -1;
};

}  // namespace ddp::test
