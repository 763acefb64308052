// Hot spares and bad nodes kept out (docs/rendezvous.md, "Hot spares" and
// "Bad nodes kept out"), with 3-5 real ddprun agents on one ddp-rendezvousd.
// Each agent has its own --local_addr (127.0.0.x), the host an exclusion names.
// The last call is 5 s: a swap that waited for it would show in the logs.
#include <catch2/catch.hpp>

#include "elastic_support.hpp"

using namespace elastic;

namespace {

std::string long_last_call() {
  auto conf = Service::conf();
  return "last_call_timeout=5" + conf.substr(conf.find(','));
}

// An agent of job "job" on `d`, host 127.0.0.<host>.
Agent node(const TempDir& dir, const std::string& name, const Daemon& d, const std::string& nnodes, int host,
           Env env, std::vector<std::string> extra = {}, int nproc = 1) {
  extra.push_back("--local_addr=127.0.0." + std::to_string(host));
  extra.push_back("--event_log=" + (dir / (name + ".events")).string());
  AgentOptions o{"c10d", d.endpoint(), nnodes, nproc, long_last_call(), std::move(env)};
  o.extra = std::move(extra);
  return Agent(dir, name, o);
}

const Env kHang{{"FAKE_HANG", "1"}};

ddp::test::RunResult ddp_store(const TempDir& dir, const Daemon& d, std::vector<std::string> args) {
  std::vector<std::string> argv{bin("ddp-store").string(), "--endpoint", d.endpoint()};
  argv.insert(argv.end(), args.begin(), args.end());
  return ddp::test::run(argv, dir.path());
}

bool logged(const Agent& a, const std::string& part) { return contains(a.proc->err(), part); }

// A 2:2 job of a (127.0.0.2) and b (127.0.0.3), running; the temp dir and the
// daemon come with it.
struct RunningPair {
  TempDir dir;  // declared first: built before the agents, gone after them
  Daemon d{dir};
  RunningPair() : a(node(dir, "a", d, "2:2", 2, kHang)), b(node(dir, "b", d, "2:2", 3, kHang)) {
    REQUIRE(wait_until([&] { return one_rank_each(2, {&a, &b}); }, 30s));
  }
  // A hot spare on 127.0.0.<host>, once it waits beside round 0.
  Agent spare(const std::string& name, int host) {
    Agent s = node(dir, name, d, "2:2", host, kHang);
    REQUIRE(
        wait_until([&] { return logged(s, "hot spare: round 0 runs with the maximum of 2 nodes"); }, 30s));
    return s;
  }
  Agent a;
  Agent b;
};

}  // namespace

TEST_CASE("spares: kill -9 of a member lets a waiting spare take its place in the restart round") {
  RunningPair p;
  Agent& a = p.a;
  Agent& b = p.b;
  Agent s = p.spare("s", 4);
  // An operator sees it as a spare.
  const auto status = ddp_store(p.dir, p.d, {"status", "--rdzv_id", "job"});
  INFO(status.out << status.err);
  CHECK(contains(status.out, "SPARES (waiting beside round 0)"));
  CHECK(contains(status.out, "127.0.0.4  1 workers"));
  CHECK(contains(read_file(p.dir / "s.events"), "\"event\":\"spare\""));

  a.proc->signal(SIGKILL);
  // (b's rank may move: its dumps of both rounds say WORLD_SIZE=2.)
  REQUIRE(wait_until([&] { return one_rank_each(2, {&s}) && b.started().size() == 2; }, 30s));
  INFO(b.proc->err() << s.proc->err());
  CHECK(logged(s, "hot spare admitted run_id=job round=1"));
  // Admitted at MAX: no last call.
  CHECK_FALSE(
      contains(b.proc->err() + s.proc->err(), "last call over, closing the round run_id=job round=1"));
  CHECK(stop_agents({&b, &s}) == "");
}

TEST_CASE("spares: two spares and two failures at once: both step in and the job stays at MAX") {
  TempDir dir;
  Daemon d(dir);
  Agent a = node(dir, "a", d, "3:3", 2, kHang);
  Agent b = node(dir, "b", d, "3:3", 3, kHang);
  Agent c = node(dir, "c", d, "3:3", 4, kHang);
  REQUIRE(wait_until([&] { return one_rank_each(3, {&a, &b, &c}); }, 30s));
  Agent s1 = node(dir, "s1", d, "3:3", 5, kHang);
  Agent s2 = node(dir, "s2", d, "3:3", 6, kHang);
  REQUIRE(wait_until([&] { return logged(s1, "hot spare:") && logged(s2, "hot spare:"); }, 30s));
  a.proc->signal(SIGKILL);
  b.proc->signal(SIGKILL);
  const bool stepped_in = wait_until(
      [&] {
        return one_rank_each(3, {&s1, &s2}) && c.started().size() == 2;
      },
      30s);
  const auto all = c.proc->err() + s1.proc->err() + s2.proc->err();
  INFO(all);
  REQUIRE(stepped_in);
  // ft_launcher's spares fail here with "Maximum number of nodes exceeded".
  CHECK_FALSE(contains(all, "ddprun: error"));
  CHECK_FALSE(c.proc->wait(0ms).has_value());
  CHECK(*s1.ranks_in_world(3).begin() != *s2.ranks_in_world(3).begin());
  for (const auto* ag : {&c, &s1, &s2}) CHECK(contains(ag->proc->err(), "group_world_size=3"));
  CHECK(stop_agents({&c, &s1, &s2}) == "");
}

TEST_CASE("spares: a spare arriving while a restart round closes waits as a spare of the new round") {
  RunningPair p;
  Agent& b = p.b;
  Agent s1 = p.spare("s1", 4);
  // a dies while s2 starts: two of b, s1 and s2 form round 1 (which two is a
  // race), the third waits beside it as a spare; never more than 2 at once.
  p.a.proc->signal(SIGKILL);
  Agent s2 = node(p.dir, "s2", p.d, "2:2", 5, kHang);
  std::vector<const Agent*> three{&b, &s1, &s2};
  const auto running = [](const Agent* ag) {
    for (auto pid : ag->started()) {
      if (ddp::test::pid_alive(pid)) return 1;
    }
    return 0;
  };
  const Agent* spare = nullptr;
  REQUIRE(wait_until(
      [&] {
        for (const auto* ag : three) {
          if (!running(ag) && logged(*ag, "hot spare: round 1")) spare = ag;
        }
        return spare != nullptr && running(&b) + running(&s1) + running(&s2) == 2;
      },
      30s));
  INFO(b.proc->err() << s1.proc->err() << s2.proc->err());
  // Then a member of round 1 dies: the spare steps in.
  const Agent* victim = nullptr;
  for (const auto* ag : three) {
    if (ag != spare && victim == nullptr) victim = ag;
  }
  victim->proc->signal(SIGKILL);
  REQUIRE(wait_until([&] { return running(spare) == 1; }, 30s));
  CHECK(logged(*spare, "hot spare admitted run_id=job"));
  for (const auto* ag : three) {
    if (ag != victim) CHECK_FALSE(ag->proc->wait(0ms).has_value());
  }
  for (const auto* ag : three) {
    if (ag != victim) ag->proc->signal(SIGTERM);
  }
  for (const auto* ag : three) {
    if (ag != victim) CHECK(ag->proc->wait(30s).has_value());
  }
}

TEST_CASE("spares: a spare with another --nproc_per_node gets one line and is not admitted") {
  RunningPair p;
  Agent s = node(p.dir, "s", p.d, "2:2", 4, kHang, {}, 2);
  const auto code = s.proc->wait(30s);
  INFO(s.proc->err());
  CHECK(code == std::optional<int>(2));
  CHECK(logged(s, "--nproc_per_node: this node runs 2 workers but the nodes of run_id=job run 1"));
  CHECK(s.started().empty());
  CHECK(stop_agents({&p.a, &p.b}) == "");
}

TEST_CASE("exclusion: a node whose workers keep failing is excluded and the job goes on without it") {
  TempDir dir;
  Daemon d(dir);
  const std::vector<std::string> k2{"--max_node_failures=2"};
  Agent a = node(dir, "a", d, "2:3", 2, kHang, k2);
  Agent c = node(dir, "c", d, "2:3", 4, kHang, k2);
  // b's worker fails a moment after each start.
  Agent b = node(dir, "b", d, "2:3", 3, {{"FAKE_EXIT", "1"}, {"FAKE_SLEEP_MS", "300"}}, k2);
  const auto code = b.proc->wait(30s);
  INFO(b.proc->err());
  CHECK(code == std::optional<int>(6));
  CHECK(logged(b, "node 127.0.0.3 excluded from run_id=job (2 worker failures within 3600s"));
  CHECK(contains(read_file(dir / "b.events"), "\"event\":\"node_excluded\""));
  // The job goes on with the two others.
  // (Ranks may move between rounds: each node's third start is in a world of 2.)
  REQUIRE(wait_until(
      [&] {
        return a.started().size() == 3 && c.started().size() == 3 && logged(a, "group_world_size=2") &&
               logged(c, "group_world_size=2");
      },
      30s));
  CHECK(logged(a, "host 127.0.0.3 excluded from the job"));
  CHECK(logged(c, "host 127.0.0.3 excluded from the job"));
  const auto listed = ddp_store(dir, d, {"excluded", "list", "--rdzv_id", "job"});
  CHECK(listed.code == 0);
  CHECK(contains(listed.out, "127.0.0.3\t2 worker failures"));
  CHECK(contains(ddp_store(dir, d, {"status", "--rdzv_id", "job"}).out, "EXCLUDED"));

  // b started again on the same host is refused with exit 6 ...
  Agent b2 = node(dir, "b2", d, "2:3", 3, kHang, k2);
  CHECK(b2.proc->wait(30s) == std::optional<int>(6));
  CHECK(logged(b2, "this node (host 127.0.0.3) is excluded from run_id=job"));
  // ... until an operator re-admits it: then it joins the job again.
  const auto readmit = ddp_store(dir, d, {"excluded", "readmit", "--rdzv_id", "job", "127.0.0.3"});
  CHECK(readmit.code == 0);
  CHECK(ddp_store(dir, d, {"excluded", "readmit", "--rdzv_id", "job", "127.0.0.3"}).code == 1);
  Agent b3 = node(dir, "b3", d, "2:3", 3, kHang, k2);
  // b3 only runs workers in a world of 3: a, c and b3.
  REQUIRE(wait_until([&] { return one_rank_each(3, {&b3}); }, 30s));
  CHECK(stop_agents({&a, &c, &b3}) == "");
}

TEST_CASE("exclusion: a job that falls below MIN because of an exclusion stops with one line, exit 6") {
  TempDir dir;
  Daemon d(dir);
  const std::vector<std::string> k1{"--max_node_failures=1"};
  Agent a = node(dir, "a", d, "2:2", 2, kHang, k1);
  Agent b = node(dir, "b", d, "2:2", 3, {{"FAKE_EXIT", "1"}, {"FAKE_SLEEP_MS", "300"}}, k1);
  const auto code_b = b.proc->wait(30s);
  const auto code_a = a.proc->wait(30s);
  INFO(a.proc->err() << b.proc->err());
  CHECK(code_b == std::optional<int>(6));
  CHECK(code_a == std::optional<int>(6));
  CHECK(logged(b, "the job stopped: 1 node(s) left, below --nnodes MIN=2; excluded: 127.0.0.3"));
  CHECK(logged(a, "below MIN after excluding 127.0.0.3"));
  CHECK(all_dead(a.started()));
}

TEST_CASE("exclusion: excluding the last node of a job says so in one line") {
  TempDir dir;
  Daemon d(dir);
  Agent a = node(dir, "a", d, "1:1", 2, {{"FAKE_EXIT", "1"}}, {"--max_node_failures=1"});
  const auto code = a.proc->wait(30s);
  INFO(a.proc->err());
  CHECK(code == std::optional<int>(6));
  CHECK(logged(a, "node 127.0.0.2 excluded (1 worker failures within 3600s"));
  CHECK(logged(a, "the job stopped: 0 node(s) left, below --nnodes MIN=1"));
}
