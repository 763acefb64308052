// The torch store proxy's view of who connected: the process at the other end
// of a loopback connection, and a variable of its environment.
#include "loopback_peer.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "loopback_listener.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using ddp::store::server::loopback_peer_pid;
using ddp::store::server::process_env;

namespace {

struct Listener {
  ddp::test::LoopbackListener socket{4};
  const std::uint16_t port = static_cast<std::uint16_t>(socket.port());
  std::vector<int> accepted;
  // Accepts one connection; returns the client's port.
  std::uint16_t accept_one() {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    const int c = ::accept(socket.fd(), reinterpret_cast<sockaddr*>(&peer), &len);
    REQUIRE(c >= 0);
    accepted.push_back(c);
    return ntohs(peer.sin_port);
  }
};

}  // namespace

TEST_CASE("the process at the other end of a loopback connection and its LOCAL_RANK are found", "[peer]") {
  ddp::test::TempDir dir;
  Listener l;
  // The connection is held by a grandchild started without LOCAL_RANK: its
  // parent's counts.
  ddp::test::Process client({"/bin/bash", "-c",
                             "env -u LOCAL_RANK /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/" +
                                 std::to_string(l.port) + "; read -t 20 <&3'; true"},
                            dir.path(), {{"LOCAL_RANK", "3"}});
  const auto client_port = l.accept_one();
  const auto pid = loopback_peer_pid(l.port, client_port, ::getpid());
  REQUIRE(pid.has_value());
  CHECK(*pid != client.pid());  // the grandchild holds the socket
  CHECK(ddp::test::read_file("/proc/" + std::to_string(*pid) + "/environ").find("LOCAL_RANK") ==
        std::string::npos);
  CHECK(process_env(*pid, "LOCAL_RANK", ::getpid()) == std::optional<std::string>("3"));
  CHECK_FALSE(process_env(*pid, "NO_SUCH_VARIABLE_HERE", ::getpid()).has_value());
  // Not a descendant of the given ancestor: not found.
  CHECK_FALSE(loopback_peer_pid(l.port, client_port, *pid).has_value());
  // Nobody connects from this port.
  CHECK_FALSE(loopback_peer_pid(
                  l.port, static_cast<std::uint16_t>(client_port + 1 == 0 ? 1 : client_port + 1), ::getpid())
                  .has_value());
}
