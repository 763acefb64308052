// ddprun --rdzv_backend=c10d when its ddp-rendezvousd misbehaves: a restart
// within the keep-alive window (with --data-dir) goes unnoticed by the workers,
// and a daemon gone for good stops every worker and ends the agents with exit 3
// naming the endpoint. Real agents, daemon and fake_workers on 127.0.0.1.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "ddp/store/job_keys.hpp"
#include "ddp/store/tcp_store.hpp"
#include "elastic_support.hpp"

using namespace elastic;

TEST_CASE(
    "elastic c10d: a daemon restarted with its data dir within the keep-alive window disturbs no worker") {
  TempDir dir;
  fs::create_directories(dir / "data");
  auto d = std::make_unique<Daemon>(dir, 0, (dir / "data").string(), "daemon");
  const int port = d->port;
  // Keep-alive window 3 s; each worker runs 4 s from its start.
  const std::string conf =
      "last_call_timeout=0.3,keep_alive_interval=0.5,keep_alive_max_attempt=6,join_timeout=30";
  const Env env{{"FAKE_SLEEP_MS", "4000"}};
  Agent a(dir, "a", AgentOptions{"c10d", d->endpoint(), "2:2", 2, conf, env, 0});
  Agent b(dir, "b", AgentOptions{"c10d", d->endpoint(), "2:2", 2, conf, env, 0});
  REQUIRE(wait_until([&] { return a.started().size() == 2 && b.started().size() == 2; }, 30s));

  d->proc.signal(SIGTERM);
  REQUIRE(d->proc.wait(10s).has_value());
  d.reset();
  Daemon again(dir, port, (dir / "data").string(), "daemon2");

  const auto ca = a.proc->wait(30s);
  const auto cb = b.proc->wait(30s);
  INFO("agent a:\n" << a.proc->err() << "\nagent b:\n" << b.proc->err());
  // max_restarts=0: a restart or a lost store would be exit 1 or 3.
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  // The same workers ran to the end: no second spawn, no round event.
  CHECK(a.started().size() == 2);
  CHECK(b.started().size() == 2);
  CHECK_FALSE(contains(a.proc->err(), "round event"));
  CHECK_FALSE(contains(b.proc->err(), "round event"));
}

TEST_CASE("elastic c10d: a daemon killed for good stops every worker and agents exit 3 naming the store") {
  TempDir dir;
  Daemon d(dir);
  // Keep-alive window 0.6 s.
  const std::string conf =
      "last_call_timeout=0.3,keep_alive_interval=0.2,keep_alive_max_attempt=3,join_timeout=30";
  Agent a(dir, "a", AgentOptions{"c10d", d.endpoint(), "2:2", 2, conf, {{"FAKE_HANG", "1"}}});
  Agent b(dir, "b", AgentOptions{"c10d", d.endpoint(), "2:2", 2, conf, {{"FAKE_HANG", "1"}}});
  REQUIRE(wait_until([&] { return a.started().size() == 2 && b.started().size() == 2; }, 30s));

  d.proc.signal(SIGKILL);
  const auto ca = a.proc->wait(30s);
  const auto cb = b.proc->wait(30s);
  check_store_lost(a, ca, b, cb, d.endpoint());
}

TEST_CASE(
    "elastic c10d: the agent hosting the store finishes last and both exit 0 promptly with no warning") {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  // The default keep-alive (5 s x 3): a node that lost the store before seeing
  // "done" would warn, and a teardown waiting on the gone store would take 15 s.
  const std::string conf = "last_call_timeout=0.3,join_timeout=30";
  Agent a(dir, "a", AgentOptions{"c10d", endpoint, "2:2", 1, conf, {{"FAKE_SLEEP_MS", "1500"}}});
  REQUIRE(wait_until([&] { return contains(a.proc->err(), "hosting it in this agent"); }, 20s));
  Agent b(dir, "b", AgentOptions{"c10d", endpoint, "2:2", 1, conf, {}});
  const auto ca = a.proc->wait(30s);
  const auto cb = b.proc->wait(30s);
  INFO("agent a:\n" << a.proc->err() << "\nagent b:\n" << b.proc->err());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  // a waited for b to leave before it stopped the store it hosts.
  CHECK_FALSE(contains(a.proc->err(), "while other nodes still hold it"));
  for (const auto* ag : {&a, &b}) {
    CHECK_FALSE(contains(ag->proc->err(), "could not be confirmed"));
    CHECK_FALSE(contains(ag->proc->err(), "round event"));
  }
}

TEST_CASE("elastic c10d: a node killed between its arrival and its record costs the round no close_timeout") {
  TempDir dir;
  Daemon d(dir);
  // The dead node, as an agent SIGKILLed right after its arrival: counted in
  // round 0 with its marker under its lease, no record; its connection closes.
  {
    ddp::store::TcpStoreOptions o;
    o.endpoint = ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(d.port)};
    o.bind_leases_to_connection = true;
    ddp::store::TcpStore dead(o);
    const auto lease = dead.lease_grant(60s);
    const auto round0 = ddp::store::keys::round_prefix("job", 0);
    std::vector<ddp::store::BatchOp> arrival{
        ddp::store::BatchOp::set(ddp::store::keys::joining_key(round0, "dead"), "", lease),
        ddp::store::BatchOp::add(round0 + "seq", (std::int64_t{1} << 32) | 1)};
    dead.batch(arrival);
    ddp::store::rethrow_first_error(arrival);
  }
  // A close_timeout of 60 s: waiting for the dead node's record would outlast the wait below.
  const std::string conf = Service::conf() + ",close_timeout=60";
  Agent a(dir, "a", AgentOptions{"c10d", d.endpoint(), "2:2", 1, conf});
  Agent b(dir, "b", AgentOptions{"c10d", d.endpoint(), "2:2", 1, conf});
  const bool formed = wait_until([&] { return one_rank_each(2, {&a, &b}); }, 20s);
  const auto both = a.proc->err() + b.proc->err();
  INFO(both);
  REQUIRE(formed);
  CHECK(contains(both, "1 node(s) left before round 0 closed"));
  CHECK(stop_agents({&a, &b}) == "");
}
