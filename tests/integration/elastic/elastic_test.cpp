// Elastic behaviour of `ddprun` with several real agents on 127.0.0.1: success,
// failure fan-out, scale up, scale down on kill -9, and the join-timeout
// message. Built twice: against a real ddp-rendezvousd (--rdzv_backend=c10d)
// and, with ELASTIC_BACKEND_ETCD, against one real etcd member
// (--rdzv_backend=etcd); the scenarios are the same. Workers are fake_worker.
#include <catch2/catch.hpp>

#include "elastic_support.hpp"

using namespace elastic;

TEST_CASE("elastic " ELASTIC_NAME ": two agents form one world, finish at different times, and both exit 0") {
  TempDir dir;
  Service d(dir);
  Agent a(dir, "a", d, "2:2", 2, {});
  Agent b(dir, "b", d, "2:2", 2, {{"FAKE_SLEEP_MS", "1500"}});  // b's workers finish later
  REQUIRE(a.proc->wait(60s) == std::optional<int>(0));
  REQUIRE(b.proc->wait(60s) == std::optional<int>(0));
  std::set<int> ranks;
  for (const auto* ag : {&a, &b}) {
    for (int r : ag->ranks_in_world(4)) ranks.insert(r);
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
  // Finishing early is not a failure: nobody re-formed or restarted.
  CHECK(a.proc->err().find("round event") == std::string::npos);
  CHECK(b.proc->err().find("round event") == std::string::npos);
  CHECK(a.started().size() == 2);
  CHECK(b.started().size() == 2);
}

TEST_CASE("elastic " ELASTIC_NAME
          ": a worker failure on one node stops every node's workers and all re-form") {
  TempDir dir;
  Service d(dir);
  // a's workers run long in round 0 (restart 0) and briefly afterwards.
  Agent a(dir, "a", d, "2:2", 2, {{"FAKE_FIRST_SLEEP_MS", "60000"}, {"FAKE_SLEEP_MS", "300"}});
  Agent b(dir, "b", d, "2:2", 2, {{"FAKE_FAIL_ON_RESTART_BELOW", "1"}, {"FAKE_SLEEP_MS", "300"}});
  REQUIRE(wait_until([&] { return a.started().size() == 2; }, 30s));
  const auto first = a.started();
  // b's workers fail at ~0.3 s; a's (still sleeping) must be stopped through the
  // failure key, long before their 60 s are up.
  REQUIRE(wait_until([&] { return all_dead(first); }, 30s));
  REQUIRE(a.proc->wait(60s) == std::optional<int>(0));
  REQUIRE(b.proc->wait(60s) == std::optional<int>(0));
  CHECK(a.proc->err().find("round event: restart_requested: ") != std::string::npos);
  CHECK(a.started().size() == 4);  // two rounds of two workers
  // Ranks may move between rounds, so round 0's dumps can outlive round 1's:
  // some dump of a's must come from the restarted round.
  std::set<std::string> restart_counts;
  for (int r : a.ranks_in_world(4)) restart_counts.insert(a.worker_env(r)["TORCHELASTIC_RESTART_COUNT"]);
  CHECK(restart_counts.count("1") == 1);
}

TEST_CASE("elastic " ELASTIC_NAME ": a new agent makes a running job scale up without spending a restart") {
  TempDir dir;
  Service d(dir);
  // max_restarts=0: spending a restart would end the job with exit 1.
  Agent a(dir, "a", d, "1:3", 1, {{"FAKE_HANG", "1"}}, 0);
  REQUIRE(wait_until([&] { return a.ranks_in_world(1).count(0) == 1; }, 30s));
  Agent b(dir, "b", d, "1:3", 1, {{"FAKE_HANG", "1"}}, 0);
  REQUIRE(wait_until([&] { return one_rank_each(2, {&a, &b}); }, 30s));
  CHECK(a.proc->running());
  CHECK(a.proc->err().find("round event: nodes_waiting") != std::string::npos);
  for (const auto* ag : {&a, &b}) {
    auto rank = *ag->ranks_in_world(2).begin();
    CHECK(ag->worker_env(rank)["TORCHELASTIC_RESTART_COUNT"] == "0");
  }
  a.proc->signal(SIGTERM);
  b.proc->signal(SIGTERM);
  CHECK(a.proc->wait(30s) == std::optional<int>(128 + SIGTERM));
  CHECK(b.proc->wait(30s).has_value());
}

TEST_CASE("elastic " ELASTIC_NAME ": kill -9 of one agent makes the others re-form without it") {
  TempDir dir;
  Service d(dir);
  Agent a(dir, "a", d, "2:3", 1, {{"FAKE_HANG", "1"}});
  Agent b(dir, "b", d, "2:3", 1, {{"FAKE_HANG", "1"}});
  Agent c(dir, "c", d, "2:3", 1, {{"FAKE_HANG", "1"}});
  REQUIRE(wait_until([&] { return ranks_in_world(3, {&a, &b, &c}) == 3; }, 30s));
  const auto a_first = a.started();
  c.proc->signal(SIGKILL);
  // How soon is a benchmark (scripts/bench/elastic.sh deadnode), not a test.
  REQUIRE(wait_until([&] { return all_dead(a_first); }, 30s));
  REQUIRE(wait_until([&] { return one_rank_each(2, {&a, &b}); }, 30s));
  CHECK(a.proc->err().find("round event: membership_changed: ") != std::string::npos);
  CHECK(stop_agents({&a, &b}) == "");
}

TEST_CASE("elastic " ELASTIC_NAME
          ": too few nodes time out with exit 3 naming who joined and how many are missing") {
  TempDir dir;
  Service d(dir);
  Agent a(dir, "a",
          AgentOptions{d.backend(), d.endpoint(), "3:3", 2, "join_timeout=2,keep_alive_interval=0.5"});
  if (Service::kIsDaemon) {
    // While it waits, an operator sees the node with ddp-store.
    REQUIRE(wait_until(
        [&] {
          auto r = ddp::test::run(
              {bin("ddp-store").string(), "--endpoint", d.endpoint(), "list", "/job/rdzv/"}, dir.path());
          return r.out.find("\"nproc\":2") != std::string::npos;
        },
        10s));
  }
  REQUIRE(a.proc->wait(30s) == std::optional<int>(3));
  const auto err = a.proc->err();
  CHECK(err.find("1 node(s) joined") != std::string::npos);
  CHECK(err.find("(2 workers)") != std::string::npos);
  CHECK(err.find("2 more needed") != std::string::npos);
  CHECK(err.find("waiting for nodes") != std::string::npos);  // live feedback
  CHECK(a.started().empty());
}

namespace {

// An agent of job "job" on `d` with one worker, --nnodes=`nnodes`, --on_failure=`on_failure`.
Agent failure_mode_agent(const TempDir& dir, const Service& d, const std::string& name,
                         const std::string& nnodes, const std::string& on_failure, Env env) {
  AgentOptions o{d.backend(), d.endpoint(), nnodes, 1, Service::conf(), std::move(env)};
  o.extra = {"--on_failure=" + on_failure};
  return Agent(dir, name, o);
}

}  // namespace

TEST_CASE(
    "elastic " ELASTIC_NAME
    ": a hot spare waiting beside a job that finishes exits 0 with it and a node that comes later exits 3") {
  // Under restart the spare waits for the round to end, under reform for a
  // place to take: either way the job's end is its end too.
  const std::string on_failure = GENERATE(as<std::string>{}, "restart", "reform");
  TempDir dir;
  Service d(dir);
  const auto agent = [&](const std::string& name, Env env) {
    return failure_mode_agent(dir, d, name, "1:1", on_failure, std::move(env));
  };
  Agent a = agent("a", {{"FAKE_SLEEP_MS", "3000"}});
  REQUIRE(wait_until([&] { return a.started().size() == 1; }, 30s));
  Agent s = agent("s", {});
  REQUIRE(
      wait_until([&] { return contains(s.proc->err(), "hot spare: round 0 runs with the maximum"); }, 30s));
  REQUIRE(a.proc->wait(60s) == std::optional<int>(0));
  // Within seconds of the job's end, not at its 30 s join timeout.
  const auto code_s = s.proc->wait(10s);
  INFO("on_failure=" << on_failure << "\nspare:\n" << s.proc->err());
  CHECK(code_s == std::optional<int>(0));
  CHECK(
      contains(s.proc->err(),
               "run_id=job finished while this node waited as a hot spare (every node of round 0 succeeded): "
               "nothing left to run"));
  CHECK(s.started().empty());

  // The same command after the job ended: the job is closed, as torchrun's
  // rendezvous is to a node that arrives after it.
  Agent late = agent("late", {});
  const auto code_late = late.proc->wait(10s);
  INFO("late:\n" << late.proc->err());
  CHECK(code_late == std::optional<int>(3));
  CHECK(
      contains(late.proc->err(),
               "ddprun: error: rendezvous of run_id=job is closed: the job finished before this node joined "
               "(every node of round 0 succeeded); start the job again with a new --rdzv_id"));
  CHECK(late.started().empty());
}

TEST_CASE("elastic " ELASTIC_NAME
          ": under --on_failure=reform a node whose workers finished exits 0 when another node is lost") {
  TempDir dir;
  Service d(dir);
  const auto agent = [&](const std::string& name, Env env) {
    return failure_mode_agent(dir, d, name, "2:2", "reform", std::move(env));
  };
  Agent a = agent("a", {{"FAKE_SLEEP_MS", "500"}});  // then a waits for b's workers
  Agent b = agent("b", {{"FAKE_HANG", "1"}});
  REQUIRE(wait_until([&] { return contains(a.proc->err(), "all 1 local workers succeeded"); }, 30s));
  REQUIRE(b.started().size() == 1);
  b.proc->signal(SIGKILL);
  // As under restart: a's own success stands. It waited for b's before.
  const auto code = a.proc->wait(10s);
  INFO(a.proc->err());
  CHECK(code == std::optional<int>(0));
  CHECK(contains(a.proc->err(),
                 "this node's workers succeeded, but the other nodes' success could not be "
                 "confirmed: node "));
}

TEST_CASE("elastic " ELASTIC_NAME ": a hot spare carries the job on when every member of the round is lost") {
  // Under restart the spare waits for the round to end, under reform for a
  // place to be offered: with no member left, nobody would do either.
  const std::string on_failure = GENERATE(as<std::string>{}, "restart", "reform");
  TempDir dir;
  Service d(dir);
  const auto agent = [&](const std::string& name) {
    return failure_mode_agent(dir, d, name, "1:1", on_failure, {{"FAKE_HANG", "1"}});
  };
  Agent a = agent("a");
  REQUIRE(wait_until([&] { return a.started().size() == 1; }, 30s));
  Agent s = agent("s");
  REQUIRE(
      wait_until([&] { return contains(s.proc->err(), "hot spare: round 0 runs with the maximum"); }, 30s));
  a.proc->signal(SIGKILL);
  // Its lease ends after the keep-alive window; the spare's worker starts in
  // round 1 well before the spare's 30 s join timeout.
  const bool started = wait_until([&] { return s.ranks_in_world(1).count(0) == 1; }, 20s);
  INFO("on_failure=" << on_failure << "\nspare:\n" << s.proc->err());
  CHECK(started);
  CHECK(contains(s.proc->err(), "every member of round 0 left it: ending it to join the next one"));
  CHECK(contains(s.proc->err(), "hot spare admitted run_id=job round=1"));
  CHECK(stop_agents({&s}) == "");
}
