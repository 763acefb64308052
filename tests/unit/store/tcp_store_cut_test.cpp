// TcpStore's at-most-once rule against a real StoreServer: a proxy between the
// two cuts the first connection after a chosen number of request bytes (inside
// a frame, or right after a whole one), then lets every later connection
// through. A non-idempotent request (ADD, APPEND, QUEUE_PUSH, COMPARE_SET,
// DELETE, LEASE_GRANT, LEASE_REVOKE, a batch of ADDs)
// must be applied at most once, and its caller gets either the right value or
// an error that says it may have been applied.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "ddp/common/error.hpp"
#include "loopback_listener.hpp"
#include "store_backends.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using namespace ddp::store;
using namespace ddp::test;

namespace {

// Forwards 127.0.0.1:port() to the server. On the first connection, once the
// handshake is answered, it forwards `cut_after` more client bytes and then
// closes both sides; later connections are forwarded whole.
class CutProxy {
 public:
  CutProxy(std::uint16_t upstream, std::size_t cut_after) : upstream_(upstream), cut_after_(cut_after) {
    thread_ = std::thread([this] { run(); });
  }
  ~CutProxy() {
    stop_ = true;
    thread_.join();
  }
  std::uint16_t port() const { return static_cast<std::uint16_t>(listener_.port()); }
  bool cut() const { return cut_; }

 private:
  void run() {
    std::vector<std::thread> pipes;
    bool first = true;
    while (!stop_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int client = ::accept(listener_.fd(), nullptr, nullptr);
      if (client < 0) continue;
      pipes.emplace_back([this, client, first] { pipe(client, first); });
      first = false;
    }
    for (auto& t : pipes) t.join();
  }

  void pipe(int client, bool cutting) {
    const int server = ddp::test::connect_loopback(upstream_);
    if (server < 0) {
      ::close(client);
      return;
    }
    bool answered = false;  // the server spoke: the handshake is done
    std::size_t budget = cut_after_;
    char buf[4096];
    while (!stop_) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      if (p[1].revents != 0) {
        const auto n = ::recv(server, buf, sizeof buf, 0);
        if (n <= 0 || ::send(client, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) break;
        answered = true;
      }
      if (p[0].revents != 0) {
        // Past the handshake, read no more than the budget: the cut falls exactly there.
        const std::size_t want = cutting && answered ? std::min(budget, sizeof buf) : sizeof buf;
        const auto n = want == 0 ? 0 : ::recv(client, buf, want, 0);
        if (n <= 0 || ::send(server, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) break;
        if (cutting && answered) {
          budget -= static_cast<std::size_t>(n);
          if (budget == 0) {
            ::usleep(50 * 1000);  // the server reads the last frame before it sees the close
            cut_ = true;
            break;
          }
        }
      }
    }
    ::close(client);
    ::close(server);
  }

  std::uint16_t upstream_;
  std::size_t cut_after_;
  ddp::test::LoopbackListener listener_{8};
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::thread thread_;
};

std::size_t frame_bytes(Op op, std::string key, std::int64_t b, std::vector<std::string> values = {}) {
  Request req;
  req.op = op;
  req.id = 1;
  req.b = b;
  req.keys.push_back(std::move(key));
  req.values = std::move(values);
  std::string out;
  encode_request(req, out);
  return out.size();
}

// A frame of an op that carries only its numbers (the lease ops).
std::size_t numbers_frame_bytes(Op op, std::int64_t a, std::int64_t b) {
  Request req;
  req.op = op;
  req.id = 1;
  req.a = a;
  req.b = b;
  std::string out;
  encode_request(req, out);
  return out.size();
}

struct Rig {
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<CutProxy> proxy;
  std::unique_ptr<TcpStore> direct;  // reads what the server holds
  explicit Rig(std::size_t cut_after) {
    server = std::make_unique<StoreServer>(loopback_server_options());
    server->start();
    proxy = std::make_unique<CutProxy>(server->port(), cut_after);
    direct = std::make_unique<TcpStore>(client_options(server->port()));
  }
  TcpStore client() const { return TcpStore(client_options(proxy->port())); }
};

}  // namespace

TEST_CASE(
    "an add whose connection is cut after the whole frame is applied once and reported as maybe applied",
    "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kAdd, "counter", 1));
  auto client = rig.client();
  CHECK_THROWS_WITH(client.add("counter", 1),
                    Contains("add was sent and may have been applied") && Contains("not sent again"));
  CHECK(rig.proxy->cut());
  // The same client reconnects and reads what happened: one increment, not two.
  CHECK(wait_until([&] { return rig.direct->try_get("counter") == std::optional<std::string>("1"); }, 5s));
  CHECK(client.add("counter", 0) == 1);
  std::this_thread::sleep_for(100ms);  // a late duplicate would land here
  CHECK(rig.direct->add("counter", 0) == 1);
}

TEST_CASE("an add whose connection is cut inside its frame is not applied and the caller is told",
          "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kAdd, "counter", 1) / 2);
  auto client = rig.client();
  CHECK_THROWS_WITH(client.add("counter", 1), Contains("may have been applied"));
  CHECK(rig.proxy->cut());
  CHECK(client.add("counter", 0) == 0);
  CHECK(rig.direct->try_get("counter") == std::optional<std::string>("0"));
}

TEST_CASE("an append cut after its frame is applied once", "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kAppend, "log", 0, {"x"}));
  auto client = rig.client();
  CHECK_THROWS_WITH(client.append("log", "x"), Contains("append was sent and may have been applied"));
  CHECK(wait_until([&] { return rig.direct->try_get("log").has_value(); }, 5s));
  std::this_thread::sleep_for(100ms);  // a late duplicate would land here
  CHECK(client.get("log", 5s) == "x");
}

TEST_CASE("a batch of adds cut after its first frame applies that one once and sends none again",
          "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kAdd, "a", 1));
  auto client = rig.client();
  std::vector<BatchOp> ops;
  ops.push_back(BatchOp::add("a", 1));
  ops.push_back(BatchOp::add("b", 1));
  CHECK_THROWS_WITH(client.batch(ops), Contains("may have been applied"));
  CHECK(wait_until([&] { return rig.direct->try_get("a") == std::optional<std::string>("1"); }, 5s));
  std::this_thread::sleep_for(100ms);
  CHECK(client.add("a", 0) == 1);
  CHECK(client.add("b", 0) == 0);
}

TEST_CASE("a queue push cut after its frame is queued once and reported as maybe applied",
          "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kQueuePush, "jobs", 0, {"item"}));
  auto client = rig.client();
  CHECK_THROWS_WITH(client.queue_push("jobs", "item"),
                    Contains("queue_push was sent and may have been applied") && Contains("not sent again"));
  CHECK(rig.proxy->cut());
  CHECK(wait_until([&] { return rig.direct->queue_len("jobs") == 1; }, 5s));
  std::this_thread::sleep_for(100ms);  // a late duplicate would land here
  CHECK(client.queue_len("jobs") == 1);
  CHECK(rig.direct->queue_len("jobs") == 1);
}

TEST_CASE("a compare_set cut after its frame is applied once and reported as maybe applied",
          "[tcp][at-most-once]") {
  Request req;
  req.op = Op::kCompareSet;
  req.id = 1;
  req.keys.push_back("k");
  req.values = {"", "v"};
  std::string frame;
  encode_request(req, frame);
  Rig rig(frame.size());
  auto client = rig.client();
  CHECK_THROWS_WITH(client.compare_set("k", "", "v"),
                    Contains("compare_set was sent and may have been applied"));
  CHECK(wait_until([&] { return rig.direct->try_get("k") == std::optional<std::string>("v"); }, 5s));
  CHECK(client.get("k", 5s) == "v");
}

TEST_CASE("a delete cut after its frame is applied and reported as maybe applied", "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kDelete, "k", 0));
  rig.direct->set("k", "v");
  auto client = rig.client();
  CHECK_THROWS_WITH(client.remove("k"), Contains("delete was sent and may have been applied"));
  CHECK(wait_until([&] { return !rig.direct->try_get("k").has_value(); }, 5s));
  // A delete sent again late would remove this.
  rig.direct->set("k", "again");
  std::this_thread::sleep_for(100ms);  // a late duplicate would land here
  CHECK(rig.direct->try_get("k") == std::optional<std::string>("again"));
}

TEST_CASE("a lease grant cut after its frame grants one lease and is reported as maybe applied",
          "[tcp][at-most-once]") {
  Rig rig(numbers_frame_bytes(Op::kLeaseGrant, 0, 60'000));
  auto client = rig.client();
  CHECK_THROWS_WITH(client.lease_grant(60s),
                    Contains("lease_grant was sent and may have been applied") && Contains("not sent again"));
  CHECK(rig.proxy->cut());
  CHECK(wait_until([&] { return rig.direct->stat()["leases"] == "1"; }, 5s));
  std::this_thread::sleep_for(100ms);  // a late duplicate would land here
  CHECK(rig.direct->stat()["leases"] == "1");
}

TEST_CASE("a lease revoke cut after its frame revokes and is reported as maybe applied",
          "[tcp][at-most-once]") {
  StoreServer server(loopback_server_options());
  server.start();
  TcpStore owner(client_options(server.port()));
  const LeaseId lease = owner.lease_grant(60s);
  owner.set("held", "v", lease);
  CutProxy proxy(server.port(), numbers_frame_bytes(Op::kLeaseRevoke, lease, 0));
  TcpStore client(client_options(proxy.port()));
  CHECK_THROWS_WITH(client.lease_revoke(lease), Contains("lease_revoke was sent and may have been applied"));
  CHECK(proxy.cut());
  // The revoke took, once: its key went with it. (A resend would only find
  // the lease gone; the error above is what keeps the caller from retrying
  // blindly.)
  CHECK(wait_until([&] { return !owner.try_get("held").has_value(); }, 5s));
  CHECK(owner.stat()["leases"] == "0");
}

TEST_CASE("a get cut inside its frame is answered on the new connection", "[tcp][at-most-once]") {
  Rig rig(frame_bytes(Op::kGet, "k", 5000) / 2);
  rig.direct->set("k", "v");
  auto client = rig.client();
  // Idempotent, so a lost answer is a plain connection error; the next call reconnects.
  CHECK_THROWS_AS(client.get("k", 5s), ddp::NetworkError);
  CHECK(client.get("k", 5s) == "v");
}
