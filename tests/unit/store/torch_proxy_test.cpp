// TorchStoreProxy between raw torch 1.x TCPStore clients and an in-process
// StoreServer on 127.0.0.1: namespacing, blocking ops, retargeting, tokens.
#include "ddp/store/torch_proxy.hpp"

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "ddp/common/error.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "failpoints.hpp"
#include "raw_tcpstore.hpp"
#include "store_backends.hpp"

using namespace std::chrono_literals;
using namespace ddp::store;
using namespace ddp::test;

namespace {

// Which lane each test client's source port belongs to (a real agent reads
// LOCAL_RANK from the connecting process instead).
class Lanes {
 public:
  void add(std::uint16_t client_port, std::string lane) {
    std::lock_guard<std::mutex> lk(mu_);
    lanes_[client_port] = std::move(lane);
  }
  std::optional<std::string> find(std::uint16_t client_port) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = lanes_.find(client_port);
    return it == lanes_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }

 private:
  std::mutex mu_;
  std::map<std::uint16_t, std::string> lanes_;
};

// A torch 1.13 TCPStore client, byte for byte (query types 0..8, keys with "/").
class TorchClient : public RawConn {
 public:
  // With `lanes`, the client's source port is put in `lane` before it connects.
  explicit TorchClient(std::uint16_t port, Lanes* lanes = nullptr, const std::string& lane = "")
      : RawConn(port, 5s, put_in_lane(lanes, lane)) {}

  void set(const std::string& k, const std::string& v) { send('\x00' + str(k) + str(v)); }
  std::string get(const std::string& k) {
    wait({k});
    send('\x02' + str(k));
    return bytes();
  }
  std::int64_t add(const std::string& k, std::int64_t d) {
    send('\x03' + str(k) + u64(static_cast<std::uint64_t>(d)));
    return i64(recv_exact(8));
  }
  std::string compare_set(const std::string& k, const std::string& e, const std::string& d) {
    send('\x01' + str(k) + str(e) + str(d));
    return bytes();
  }
  bool check(const std::vector<std::string>& keys) {
    return send_keys('\x04', keys), recv_exact(1) == std::string(1, '\0');
  }
  void start_wait(const std::vector<std::string>& keys) { send_keys('\x05', keys); }
  void wait(const std::vector<std::string>& keys) {
    start_wait(keys);
    REQUIRE(recv_exact(1) == std::string(1, '\0'));
  }
  std::int64_t num_keys() {
    send(std::string(1, '\x06'));
    return i64(recv_exact(8));
  }
  std::int64_t remove(const std::string& k) {
    send('\x08' + str(k));
    return i64(recv_exact(8));
  }

 private:
  static std::function<void(std::uint16_t)> put_in_lane(Lanes* lanes, const std::string& lane) {
    if (!lanes) return {};
    return [lanes, lane](std::uint16_t source_port) { lanes->add(source_port, lane); };
  }
  void send_keys(char type, const std::vector<std::string>& keys) {
    std::string b(1, type);
    b += u64(keys.size());
    for (const auto& k : keys) b += str(k);
    send(b);
  }
  std::string bytes() { return recv_exact(static_cast<std::size_t>(i64(recv_exact(8)))); }
};

struct Setup {
  explicit Setup(std::string token = "") {
    auto opts = loopback_server_options();
    opts.token = token;
    server = std::make_unique<StoreServer>(opts);
    server->start();
    auto copts = client_options(server->port());
    copts.token = token;
    store = std::make_unique<TcpStore>(copts);
  }
  std::unique_ptr<TorchStoreProxy> proxy(const std::string& prefix, const std::string& token = "",
                                         Lanes* lanes = nullptr) {
    ddp::store::TorchProxyOptions options;
    if (lanes) options.lane_of = [lanes](std::uint16_t client_port) { return lanes->find(client_port); };
    auto p = std::make_unique<TorchStoreProxy>(options);
    p->start();
    p->set_target({{"127.0.0.1", server->port()}, token, prefix});
    return p;
  }
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<TcpStore> store;
};

// Two jobs' proxies in front of one store, each under its own round prefix.
struct TwoJobs : Setup {
  TwoJobs() : job1(proxy("/job1/worker/round_0/")), job2(proxy("/job2/worker/round_0/")) {}
  std::unique_ptr<TorchStoreProxy> job1;
  std::unique_ptr<TorchStoreProxy> job2;
};

}  // namespace

TEST_CASE("two proxies on one store keep the same torch keys of two jobs apart", "[proxy]") {
  TwoJobs s;
  TorchClient a(s.job1->port());
  TorchClient b(s.job2->port());
  a.set("/worker/attempt_0/addr", "job1-rank0");
  b.set("/worker/attempt_0/addr", "job2-rank0");
  CHECK(a.get("/worker/attempt_0/addr") == "job1-rank0");
  CHECK(b.get("/worker/attempt_0/addr") == "job2-rank0");
  CHECK(a.add("/init/", 1) == 1);
  CHECK(b.add("/init/", 1) == 1);
  CHECK(s.store->try_get("/job1/worker/round_0/worker/attempt_0/addr") ==
        std::optional<std::string>("job1-rank0"));
  CHECK(s.store->try_get("/job2/worker/round_0/init/") == std::optional<std::string>("1"));
  CHECK(s.store->num_keys() == 4);
  CHECK(a.num_keys() == 2);  // only job 1's round
}

TEST_CASE("a WAIT through the proxy is released by a set in its namespace only", "[proxy]") {
  TwoJobs s;
  TorchClient waiter(s.job1->port());
  TorchClient other_job(s.job2->port());
  TorchClient same_job(s.job1->port());
  waiter.start_wait({"/later"});
  other_job.set("/later", "x");
  CHECK_FALSE(waiter.replied_within(200ms));
  CHECK_FALSE(same_job.check({"/later"}));
  same_job.set("/later", "y");
  CHECK(waiter.recv_exact(1) == std::string(1, '\0'));
  CHECK(waiter.get("/later") == "y");
}

TEST_CASE("compare_set, delete and check keep torch semantics through the proxy", "[proxy]") {
  Setup s;
  auto p = s.proxy("/j/worker/round_2/");
  TorchClient c(p->port());
  CHECK(c.compare_set("/k", "", "v1") == "v1");
  CHECK(c.compare_set("/k", "nope", "v2") == "v1");
  CHECK(c.compare_set("/absent", "x", "y") == "x");
  CHECK(c.check({"/k"}));
  CHECK_FALSE(c.check({"/k", "/absent"}));
  CHECK(c.remove("/k") == 1);
  CHECK(c.remove("/k") == 0);
  CHECK(c.num_keys() == 0);
  CHECK_FALSE(s.store->try_get("/k"));
}

TEST_CASE("a new target closes the old round's connections and hides its keys", "[proxy]") {
  Setup s;
  auto p = s.proxy("/j/worker/round_0/");
  TorchClient old_round(p->port());
  old_round.set("/worker/attempt_0/rank0", "old");
  CHECK(old_round.check({"/worker/attempt_0/rank0"}));
  p->set_target({{"127.0.0.1", s.server->port()}, "", "/j/worker/round_1/"});
  CHECK(old_round.closed_by_peer());
  TorchClient new_round(p->port());
  CHECK_FALSE(new_round.check({"/worker/attempt_0/rank0"}));
  new_round.set("/worker/attempt_0/rank0", "new");
  CHECK(new_round.check({"/worker/attempt_0/rank0"}));  // SET has no reply: this orders it
  CHECK(s.store->try_get("/j/worker/round_0/worker/attempt_0/rank0") == std::optional<std::string>("old"));
  CHECK(s.store->try_get("/j/worker/round_1/worker/attempt_0/rank0") == std::optional<std::string>("new"));
}

TEST_CASE("the proxy presents the job's token, which torch clients cannot", "[proxy]") {
  Setup s("secret");
  auto good = s.proxy("/j/worker/round_0/", "secret");
  TorchClient c(good->port());
  CHECK(c.add("/n", 5) == 5);
  auto bad = s.proxy("/j/worker/round_0/", "wrong");
  TorchClient refused(bad->port());
  CHECK(refused.closed_by_peer());
}

TEST_CASE("a prefix without a trailing slash is refused", "[proxy]") {
  TorchStoreProxy p(ddp::store::TorchProxyOptions{});
  p.start();
  TorchProxyTarget target;
  target.store = ddp::Endpoint{"127.0.0.1", 1};
  target.key_prefix = "/j/worker/round_0";
  CHECK_THROWS_AS(p.set_target(target), ddp::ConfigError);
}

TEST_CASE("a native-protocol client reaching the proxy is relayed unchanged", "[proxy]") {
  Setup s("secret");
  auto p = s.proxy("/j/worker/round_0/", "secret");
  auto opts = client_options(p->port());
  opts.token = "secret";
  TcpStore native(opts);  // e.g. `ddp-store --endpoint $MASTER_ADDR:$MASTER_PORT` in a worker
  native.set("/j/worker/round_0/rank_0", "ok");
  CHECK(s.store->try_get("/j/worker/round_0/rank_0") == std::optional<std::string>("ok"));
  CHECK(native.get("/j/worker/round_0/rank_0", 1s) == "ok");
  opts.token = "wrong";
  CHECK_THROWS_AS(TcpStore(opts), ddp::store::AuthError);
}

TEST_CASE("a torch 2.x client's CANCEL_WAIT reaches the WAIT it cancels through the proxy", "[proxy]") {
  Setup s;
  auto p = s.proxy("/j/worker/round_0/");
  TorchClient c(p->port());
  // VALIDATE with torch's magic, PING (echoed), then WAIT on a missing key and CANCEL_WAIT.
  const std::string validate = std::string(1, '\x00') + std::string("\xCE\xF7\x85\x3C", 4);
  const std::string ping = std::string(1, '\x0D') + std::string("\x2A\x00\x00\x00", 4);
  c.send(validate + ping);
  CHECK(c.recv_exact(4) == std::string("\x2A\x00\x00\x00", 4));
  c.send(std::string(1, '\x06') + u64(1) + str("/never"));
  CHECK_FALSE(c.replied_within(200ms));
  c.send(std::string(1, '\x0C'));
  CHECK(c.recv_exact(1) == std::string(1, '\x01'));     // WAIT_CANCELED
  c.send(std::string(1, '\x04') + str("/n") + u64(2));  // v2 ADD
  CHECK(i64(c.recv_exact(8)) == 2);
  CHECK(s.store->try_get("/j/worker/round_0/n") == std::optional<std::string>("2"));
}

TEST_CASE("a torch 2.x client's queues and LIST stay in its job's namespace through the proxy", "[proxy]") {
  TwoJobs s;
  TorchClient a(s.job1->port());
  TorchClient b(s.job2->port());
  const std::string validate = std::string(1, '\x00') + std::string("\xCE\xF7\x85\x3C", 4);
  a.send(validate);
  b.send(validate);
  // QUEUE_PUSH (14) has no reply; QUEUE_LEN (16) orders it and answers an i64.
  a.send(std::string(1, '\x0E') + str("/q") + str("first"));
  a.send(std::string(1, '\x0E') + str("/q") + str("second"));
  a.send(std::string(1, '\x10') + str("/q"));
  CHECK(i64(a.recv_exact(8)) == 2);
  b.send(std::string(1, '\x10') + str("/q"));
  CHECK(i64(b.recv_exact(8)) == 0);  // job 2's queue of the same name is empty
  // QUEUE_POP (15): the length before, then the front value.
  a.send(std::string(1, '\x0F') + str("/q"));
  CHECK(i64(a.recv_exact(8)) == 2);
  CHECK(a.recv_exact(static_cast<std::size_t>(i64(a.recv_exact(8)))) == "first");
  // LIST (17) answers only this round's keys, as the client named them.
  a.send(std::string(1, '\x01') + str("/k1") + str("x"));  // v2 SET
  b.send(std::string(1, '\x01') + str("/k2") + str("y"));
  a.send(std::string(1, '\x11'));
  REQUIRE(i64(a.recv_exact(8)) == 1);
  CHECK(a.recv_exact(static_cast<std::size_t>(i64(a.recv_exact(8)))) == "/k1");
}

TEST_CASE("a rank that closes its store and connects again, as a re-init does, meets fresh keys", "[proxy]") {
  Setup s;
  Lanes lanes;
  auto p = s.proxy("/j/worker/round_0/", "", &lanes);
  {
    TorchClient rank0(p->port(), &lanes, "0");
    TorchClient rank1(p->port(), &lanes, "1");
    TorchClient rank0_second(p->port(), &lanes, "0");  // a second connection of the same init shares its keys
    CHECK(rank0.add("/default_pg/store_based_barrier_key:1", 1) == 1);
    CHECK(rank1.add("/default_pg/store_based_barrier_key:1", 1) == 2);
    CHECK(rank0_second.add("/default_pg/store_based_barrier_key:1", 0) == 2);
  }
  // Both ranks let their process group go and init again: the barrier counts from zero.
  TorchClient rank0(p->port(), &lanes, "0");
  CHECK(rank0.add("/default_pg/store_based_barrier_key:1", 1) == 1);
  CHECK_FALSE(rank0.check({"/default_pg/store_based_barrier_key:1", "/only_in_first"}));
  TorchClient rank1(p->port(), &lanes, "1");
  CHECK(rank1.add("/default_pg/store_based_barrier_key:1", 1) == 2);
  CHECK(s.store->try_get("/j/worker/round_0/default_pg/store_based_barrier_key:1") ==
        std::optional<std::string>("2"));
  CHECK(s.store->try_get("/j/worker/round_0/gen_1/default_pg/store_based_barrier_key:1") ==
        std::optional<std::string>("2"));
  CHECK(p->stats().at("generations") == 2);
}

TEST_CASE("a rank that re-inits before the others have closed waits for them in the new generation",
          "[proxy]") {
  Setup s;
  Lanes lanes;
  auto p = s.proxy("/j/worker/round_0/", "", &lanes);
  auto slow = std::make_unique<TorchClient>(p->port(), &lanes, "1");
  slow->set("/rank_1", "first-address");
  {
    TorchClient fast(p->port(), &lanes, "0");
    fast.set("/rank_0", "first-address");
  }
  TorchClient fast(p->port(), &lanes, "0");
  fast.start_wait({"/rank_1"});
  CHECK_FALSE(fast.replied_within(200ms));  // the slow rank's old key is not this init's
  slow.reset();
  TorchClient slow_again(p->port(), &lanes, "1");
  slow_again.set("/rank_1", "second-address");
  CHECK(fast.recv_exact(1) == std::string(1, '\0'));
  CHECK(fast.get("/rank_1") == "second-address");
}

TEST_CASE("a new round starts every lane at its first generation again", "[proxy]") {
  Setup s;
  Lanes lanes;
  auto p = s.proxy("/j/worker/round_0/", "", &lanes);
  // A reply after each set: requests on one connection are answered in order.
  {
    TorchClient first(p->port(), &lanes, "0");
    first.set("/k", "round0-gen0");
    CHECK(first.check({"/k"}));
  }
  {
    TorchClient second(p->port(), &lanes, "0");
    second.set("/k", "round0-gen1");
    CHECK(second.check({"/k"}));
  }
  p->set_target({{"127.0.0.1", s.server->port()}, "", "/j/worker/round_1/"});
  TorchClient next_round(p->port(), &lanes, "0");
  next_round.set("/k", "round1-gen0");
  CHECK(next_round.check({"/k"}));
  CHECK(s.store->try_get("/j/worker/round_1/k") == std::optional<std::string>("round1-gen0"));
  CHECK(s.store->try_get("/j/worker/round_0/gen_1/k") == std::optional<std::string>("round0-gen1"));
}

TEST_CASE("a client whose lane is unknown keeps the round's keys however often it reconnects", "[proxy]") {
  Setup s;
  Lanes lanes;
  auto p = s.proxy("/j/worker/round_0/", "", &lanes);
  {
    TorchClient first(p->port());
    first.set("/k", "a");
    CHECK(first.check({"/k"}));
  }
  TorchClient again(p->port());
  CHECK(again.get("/k") == "a");
  CHECK(p->stats().at("generations") == 0);
}

TEST_CASE("an exception in the proxy's accept handler does not stop the proxy accepting", "[proxy]") {
  Setup s;
  auto p = s.proxy("/job1/worker/round_0/");
  ddp::store::server::failpoints::arm("proxy.accept=throw*1");
  TorchClient first(p->port());  // its accept throws
  CHECK(first.closed_by_peer());
  TorchClient second(p->port());
  second.set("/k", "v");
  CHECK(second.get("/k") == "v");
}

TEST_CASE("an exception in a proxy connection's handler closes that client only", "[proxy]") {
  Setup s;
  auto p = s.proxy("/job1/worker/round_0/");
  TorchClient good(p->port());
  good.set("/before", "1");
  CHECK(good.get("/before") == "1");
  ddp::store::server::failpoints::arm("proxy.read=throw*1");
  TorchClient bad(p->port());
  bad.set("/bad", "x");  // its first read throws
  CHECK(bad.closed_by_peer());
  good.set("/after", "2");
  CHECK(good.get("/after") == "2");
  TorchClient later(p->port());
  CHECK(later.get("/after") == "2");
}

TEST_CASE("a proxy whose store is named by host name reaches it as by address", "[proxy]") {
  Setup s;
  ddp::store::TorchProxyOptions options;
  TorchStoreProxy p(options);
  p.start();
  p.set_target({{"localhost", s.server->port()}, "", "/named/worker/round_0/"});
  TorchClient c(p.port());
  c.set("/k", "by name");
  CHECK(c.get("/k") == "by name");
  CHECK(s.store->try_get("/named/worker/round_0/k") == std::optional<std::string>("by name"));
}
