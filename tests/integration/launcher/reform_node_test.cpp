// --on_failure=reform when a whole node is lost (docs/reform.md, "A lost
// node"): kill -9 of one of two agents of ddp-example-train-reform on one
// ddp-rendezvousd. The other node's workers keep their processes; a hot spare
// takes the lost node's ranks, or, with none, the job goes on with two.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <set>

#include "reform_node_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace ddp::test::launcher::reform_node;
using namespace std::chrono_literals;

namespace {

// Two agents running their workers (the second closes the round at MAX).
struct RunningNodes {
  TempDir dir;
  LocalDaemon daemon{dir};
  std::optional<Process> a, b;
  RunningNodes() {
    REQUIRE(daemon.port > 0);
    a.emplace(node(dir, daemon, "nodea"), dir.path(), info_env(), "nodea");
    b.emplace(node(dir, daemon, "nodeb"), dir.path(), info_env(), "nodeb");
    REQUIRE(wait_until(
        [&] { return count(a->out(), " start: rank") == 2 && count(b->out(), " start: rank") == 2; }, 60s));
  }
  // kill -9 of b's agent once its workers trained a few steps.
  void kill_b() {
    REQUIRE(wait_until([&] { return count(a->out() + b->out(), "epoch 1/6") > 0; }, 60s));
    b->signal(SIGKILL);
    CHECK(b->wait(10s).has_value());
  }
};

}  // namespace

TEST_CASE(
    "reform: kill -9 of a node's agent lets a hot spare take its ranks while the other node's workers train "
    "on") {
  RunningNodes job;
  Process s(node(job.dir, job.daemon, "nodes"), job.dir.path(), info_env(), "nodes");
  REQUIRE(wait_until([&] { return count(s.err(), "hot spare") > 0; }, 30s));
  const auto before = starts(job.a->out());
  REQUIRE(before.size() == 2);
  job.kill_b();
  const auto a_code = job.a->wait(90s);
  const auto s_code = s.wait(90s);
  const std::string out = job.a->out() + s.out();
  INFO("node a:\n" << job.a->err() << job.a->out() << "spare:\n" << s.err() << s.out());
  CHECK(a_code == std::optional<int>(0));
  CHECK(s_code == std::optional<int>(0));
  // a's workers kept their processes; the spare's two joined without state.
  CHECK(starts(job.a->out()) == before);
  CHECK(count(s.out(), " start: rank") == 2);
  CHECK(count(s.out(), "joining without state") == 2);
  CHECK_THAT(job.a->err(), Catch::Contains("hot spare ") && Catch::Contains(" takes its place (ranks "));
  CHECK_THAT(s.err(), Catch::Contains("this hot spare takes its place: ranks "));
  CHECK_THAT(job.a->err(), !Catch::Contains("restarting workers"));
  CHECK_THAT(out, Catch::Contains("re-form: generation 1, world 4 (lost slots -, new slots "));
  // No step lost or done twice: the run's 96 steps, and the failure-free loss.
  CHECK_THAT(out, Catch::Contains("after 6 epochs, 96 steps, 1 re-forms, 0 restarts"));
  // The same world throughout: the failure-free run's loss.
  TempDir clean_dir;
  std::vector<std::string> clean = {"--standalone", "--nproc_per_node=4", "--no_python"};
  for (auto& arg : trainer(clean_dir)) clean.push_back(arg);
  const RunResult c = ddprun(clean, clean_dir);
  REQUIRE(c.code == 0);
  CHECK(std::abs(final_loss(out) - final_loss(c.out)) <= 1e-6 * std::abs(final_loss(c.out)));
}

TEST_CASE("reform: kill -9 of a node's agent with no spare: the other node goes on with a world of two") {
  RunningNodes job;
  const auto before = starts(job.a->out());
  job.kill_b();
  const auto a_code = job.a->wait(90s);
  INFO("node a:\n" << job.a->err() << job.a->out());
  CHECK(a_code == std::optional<int>(0));
  CHECK(starts(job.a->out()) == before);
  CHECK_THAT(job.a->err(), Catch::Contains("no hot spare: the job goes on without ranks ") &&
                               Catch::Contains("world size 2"));
  CHECK_THAT(job.a->out(), Catch::Contains("world 2") && Catch::Contains("1 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(job.a->out())));
}

TEST_CASE("reform: a lost node whose workers cannot re-form in place restarts every node as before") {
  // Workers that never join a ddp::ElasticGroup: the agents cannot keep them.
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  auto argv = [&](const std::string& name) {
    return ddprun_argv({"--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=" + daemon.endpoint, "--rdzv_id=plain",
                        "--rdzv_conf=join_timeout=60,last_call_timeout=1,keep_alive_interval=0.5",
                        "--local_addr=" + name, "--on_failure=reform", "--max_restarts=0", "--no_python",
                        bin("fake_worker").string()});
  };
  const auto env = clean_env({{"FAKE_PID_FILE", (dir / "pids").string()}, {"FAKE_SLEEP_MS", "4000"}});
  Process a(argv("nodea"), dir.path(), env, "nodea");
  Process b(argv("nodeb"), dir.path(), env, "nodeb");
  REQUIRE(wait_until([&] { return count(read_file(dir / "pids"), " start") == 4; }, 60s));
  b.signal(SIGKILL);
  CHECK(b.wait(10s).has_value());
  const auto code = a.wait(60s);
  INFO(a.err());
  CHECK(code == std::optional<int>(0));
  CHECK_THAT(a.err(), Catch::Contains("its workers cannot re-form in place: every node rejoins"));
  // a's two workers started again in the next round.
  CHECK(count(read_file(dir / "pids"), " start") == 6);
}

TEST_CASE("reform: a node joining a running job of 2 of 3 nodes grows its world at a step boundary") {
  GrowingJob job;
  Process& a = *job.a;
  Process& b = *job.b;
  Process& c = *job.c;
  const auto codes = std::vector<std::optional<int>>{a.wait(90s), b.wait(90s), c.wait(90s)};
  const std::string out = a.out() + b.out() + c.out();
  INFO("a:\n" << a.err() << a.out() << "b:\n" << b.err() << b.out() << "c:\n" << c.err() << c.out());
  for (const auto& code : codes) CHECK(code == std::optional<int>(0));
  // The first two nodes' workers kept their processes; c's joined them.
  CHECK(starts(a.out() + b.out()) == job.before);
  CHECK_THAT(c.err(), Catch::Contains("this node grows the running job: ranks 4-5 join its workers"));
  CHECK_THAT(c.out(), Catch::Contains("start: rank 4 of 6, generation 1, joining without state"));
  CHECK_THAT(a.err() + b.err(), Catch::Contains("admitted into the running job"));
  CHECK_THAT(a.err() + b.err(), !Catch::Contains("re-forming the group"));
  CHECK_THAT(out, Catch::Contains("re-form: generation 1, world 6 (lost slots -, new slots 4,5)"));
  CHECK_THAT(out, Catch::Contains("1 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(out)));
}

TEST_CASE("reform: a node that grew the running job is lost like any other: the others go on without it") {
  GrowingJob job;
  Process& a = *job.a;
  Process& b = *job.b;
  Process& c = *job.c;
  REQUIRE(job.wait_grown());
  c.signal(SIGKILL);
  const auto ca = a.wait(90s), cb = b.wait(90s);
  INFO("a:\n" << a.err() << a.out() << "b:\n" << b.err() << b.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  CHECK_THAT(a.err() + b.err(),
             Catch::Contains("(group rank 2) lost; no hot spare: the job goes on without ranks 4-5, "
                             "world size 4"));
  CHECK_THAT(a.out() + b.out(),
             Catch::Contains("re-form: generation 2, world 4 (lost slots 4,5, new slots -)"));
  CHECK_THAT(a.out() + b.out(), Catch::Contains("2 re-forms, 0 restarts"));
}
