// Restart rounds with a long last call (5 s): a round re-formed after a
// failure closes as soon as every live member of the previous round is back,
// a member that vanished is waited for only until its lease is gone, and a
// newcomer still gets the last call (docs/rendezvous.md, "Restart rounds close
// at once"). The first round of each job does wait the last call, as torchrun's
// does. Built into both elastic binaries (c10d daemon and etcd).
#include <catch2/catch.hpp>

#include "elastic_support.hpp"

using namespace elastic;

namespace {

// Service::conf() with a 5 s last call.
std::string long_last_call() {
  auto conf = Service::conf();
  return "last_call_timeout=5" + conf.substr(conf.find(','));
}

Agent agent(const TempDir& dir, const std::string& name, const Service& svc, const std::string& nnodes,
            Env env) {
  return Agent(dir, name,
               AgentOptions{svc.backend(), svc.endpoint(), nnodes, 1, long_last_call(), std::move(env)});
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The joint log of the agents: one of them closes each round.
template <class... A>
std::string logs(const A&... agents) {
  return (agents.proc->err() + ...);
}

// Three hanging nodes of a 2:4 job, past their first round (a world of 3).
// The temp dir and the rendezvous service of the test come with them.
struct ThreeNodes {
  TempDir dir;  // declared first: built before the agents, gone after them
  Service svc{dir};
  ThreeNodes()
      : a(agent(dir, "a", svc, "2:4", {{"FAKE_HANG", "1"}})),
        b(agent(dir, "b", svc, "2:4", {{"FAKE_HANG", "1"}})),
        c(agent(dir, "c", svc, "2:4", {{"FAKE_HANG", "1"}})) {
    // A worker dumps its env before it writes its pid: wait for both.
    REQUIRE(wait_until(
        [&] {
          return ranks_in_world(3, {&a, &b, &c}) == 3 && !a.started().empty() && !b.started().empty() &&
                 !c.started().empty();
        },
        30s));
  }
  Agent a;
  Agent b;
  Agent c;
};

}  // namespace

TEST_CASE("elastic " ELASTIC_NAME
          ": after a worker failure the restarted round closes without the last call") {
  TempDir dir;
  Service d(dir);
  Agent a = agent(dir, "a", d, "2:3", {{"FAKE_HANG", "1"}});
  Agent b = agent(dir, "b", d, "2:3",
                  {{"FAKE_FAIL_ON_RESTART_BELOW", "1"}, {"FAKE_SLEEP_MS", "300"}, {"FAKE_HANG", "1"}});
  // Round 0 is a first round: it waits the last call for more nodes.
  REQUIRE(wait_until([&] { return !a.started().empty() && !b.started().empty(); }, 30s));
  // b's worker fails in restart 0; both rejoin and round 1 closes at once.
  REQUIRE(wait_until([&] { return a.started().size() == 2 && b.started().size() == 2; }, 30s));
  const auto all = logs(a, b);
  CHECK(count(all, "every live member of round 0 rejoined: round 1 closed at once") >= 1);
  CHECK(count(all, "last call over, closing the round run_id=job round=1") == 0);
  CHECK(count(all, "last call over, closing the round run_id=job round=0") >= 1);
  for (const auto* ag : {&a, &b}) {
    // Ranks may move between rounds; some dump of each node is from restart 1.
    std::set<std::string> restarts;
    for (int r : ag->ranks_in_world(2)) restarts.insert(ag->worker_env(r)["TORCHELASTIC_RESTART_COUNT"]);
    CHECK(restarts.count("1") == 1);
  }
  CHECK(stop_agents({&a, &b}) == "");
}

TEST_CASE("elastic " ELASTIC_NAME
          ": kill -9 of one of three nodes re-forms a world of two without the last call") {
  ThreeNodes n;
  n.c.proc->signal(SIGKILL);
  REQUIRE(wait_until([&] { return one_rank_each(2, {&n.a, &n.b}); }, 30s));
  const auto all = logs(n.a, n.b);
  CHECK(count(all, "every live member of round 0 rejoined: round 1 closed at once run_id=job nodes=2") >= 1);
  CHECK(count(all, "round=1 nodes=2 last_call_timeout") == 0);
  std::set<int> ranks{*n.a.ranks_in_world(2).begin(), *n.b.ranks_in_world(2).begin()};
  CHECK(ranks == std::set<int>{0, 1});
  CHECK(stop_agents({&n.a, &n.b}) == "");
}

TEST_CASE("elastic " ELASTIC_NAME
          ": a member frozen during a restart is waited for only until its lease expires") {
  ThreeNodes n;
  // c stops answering (its lease runs out after the keep-alive window) while
  // a worker of a dies: a and b rejoin, c cannot.
  n.c.proc->signal(SIGSTOP);
  ::kill(n.a.started().at(0), SIGKILL);
  REQUIRE(wait_until([&] { return one_rank_each(2, {&n.a, &n.b}); }, 30s));
  const auto all = logs(n.a, n.b);
  CHECK(count(all, "round 1 closed at once run_id=job nodes=2") >= 1);
  CHECK(count(all, "round=1 nodes=2 last_call_timeout") == 0);
  n.c.proc->signal(SIGKILL);
  CHECK(stop_agents({&n.a, &n.b}) == "");
}

TEST_CASE("elastic " ELASTIC_NAME ": a newcomer still gets the last call when the job re-forms for it") {
  TempDir dir;
  Service d(dir);
  Agent a = agent(dir, "a", d, "2:4", {{"FAKE_HANG", "1"}});
  Agent b = agent(dir, "b", d, "2:4", {{"FAKE_HANG", "1"}});
  REQUIRE(wait_until([&] { return one_rank_each(2, {&a, &b}); }, 30s));
  Agent c = agent(dir, "c", d, "2:4", {{"FAKE_HANG", "1"}});
  REQUIRE(wait_until([&] { return ranks_in_world(3, {&a, &b, &c}) == 3; }, 30s));
  const auto all = logs(a, b, c);
  // Round 1 (a, b and the newcomer c, below MAX) waited the last call.
  CHECK(count(all, "closed at once") == 0);
  CHECK(count(all, "last call over, closing the round run_id=job round=1 nodes=3") >= 1);
  CHECK(stop_agents({&c, &a, &b}) == "");
}
