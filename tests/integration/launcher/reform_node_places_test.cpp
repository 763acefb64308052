// --on_failure=reform when a node is lost in a job that grew, or whose nodes
// run different --nproc_per_node (docs/reform.md, "A lost node"): the nodes
// that grew the job count towards its --nnodes minimum, and a hot spare takes
// the place of a node that ran as many workers as it does, with that node's
// ranks, wherever they lie.
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <regex>
#include <set>

#include "reform_node_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace ddp::test::launcher::reform_node;
using namespace std::chrono_literals;

namespace {

// The lowest worker rank in `out`'s "start: rank R of 4" lines ("" if none).
std::string first_rank(const std::string& out) {
  const std::regex line(R"(start: rank (\d+) of 4)");
  int lowest = -1;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it)
    lowest = lowest < 0 ? std::stoi((*it)[1]) : std::min(lowest, std::stoi((*it)[1]));
  return lowest < 0 ? "" : std::to_string(lowest);
}

// An agent of a --nnodes=`nnodes` job (last call `last_call` s) training
// `epochs` epochs (40: long enough for losses and newcomers), with `conf`
// added to its --rdzv_conf.
std::vector<std::string> node_argv(const TempDir& dir, const LocalDaemon& daemon, const std::string& name,
                                   int nproc, const std::string& nnodes, const std::string& last_call,
                                   const std::string& epochs, const std::string& conf = "") {
  auto argv = node(dir, daemon, name, nnodes, last_call, nproc);
  const auto at = std::find(argv.begin(), argv.end(), "--epochs");
  REQUIRE(at + 1 < argv.end());
  *(at + 1) = epochs;
  for (auto& arg : argv)
    if (arg.rfind("--rdzv_conf=", 0) == 0) arg += conf;
  return argv;
}

// Starts `p`, node_argv's agent, and waits until it joined.
void start_node(std::optional<Process>& p, const TempDir& dir, const LocalDaemon& daemon,
                const std::string& name, int nproc, const std::string& nnodes = "1:4",
                const std::string& last_call = "5", const std::string& epochs = "40",
                const std::string& conf = "") {
  p.emplace(node_argv(dir, daemon, name, nproc, nnodes, last_call, epochs, conf), dir.path(), info_env(),
            name);
  REQUIRE(wait_until([&] { return count(p->err(), "joined round") > 0; }, 30s));
}

// Agents whose arrival order is their group rank: each waits for the one before to join.
struct MixedJob {
  TempDir dir;
  LocalDaemon daemon{dir};
  std::optional<Process> a, c, b;  // group ranks 0, 1, 2: 2, 2 and 1 workers
  std::set<std::string> before;    // a's and c's worker pids
  std::string nnodes;
  explicit MixedJob(std::string nn = "3:3") : nnodes(std::move(nn)) {
    REQUIRE(daemon.port > 0);
    start(a, "nodea", 2);
    start(c, "nodec", 2);
    start(b, "nodeb", 1);
    REQUIRE(wait_until([&] { return count(a->out() + b->out() + c->out(), "epoch 1/6") > 0; }, 60s));
    before = starts(a->out() + c->out());
    REQUIRE(before.size() == 4);
    REQUIRE_THAT(b->out(), Catch::Contains("start: rank 4 of 5"));
  }
  void start(std::optional<Process>& p, const std::string& name, int nproc) {
    start_node(p, dir, daemon, name, nproc, nnodes, "30", "6");
  }
  // A fourth node, a hot spare (the round has MAX nodes) of `nproc` workers.
  Process& spare(int nproc) {
    s.emplace(node(dir, daemon, "nodes", nnodes, "30", nproc), dir.path(), info_env(), "nodes");
    REQUIRE(wait_until([&] { return count(s->err(), "hot spare") > 0; }, 30s));
    return *s;
  }
  std::optional<Process> s;
};

}  // namespace

TEST_CASE(
    "reform: with --nnodes=2:3, a node that was there from the start lost after a third grew the job: the "
    "two left go on") {
  GrowingJob job("2:3");
  Process& a = *job.a;
  Process& b = *job.b;
  Process& c = *job.c;
  REQUIRE(job.wait_grown());
  const auto a_pids = starts(a.out());
  const auto c_pids = starts(c.out());
  const std::string r = first_rank(b.out());
  REQUIRE((r == "0" || r == "2"));
  const std::string ranks = r + "-" + std::to_string(std::stoi(r) + 1);
  b.signal(SIGKILL);
  CHECK(b.wait(10s).has_value());
  const auto ca = a.wait(90s), cc = c.wait(90s);
  INFO("a:\n" << a.err() << a.out() << "c:\n" << c.err() << c.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cc == std::optional<int>(0));
  CHECK(starts(a.out()) == a_pids);
  CHECK(starts(c.out()) == c_pids);
  CHECK_THAT(a.err() + c.err(), !Catch::Contains("every node rejoins"));
  CHECK_THAT(a.err() + c.err(), Catch::Contains("lost; no hot spare: the job goes on without ranks " + ranks +
                                                ", world size 4"));
  CHECK_THAT(a.out() + c.out(), Catch::Contains("re-form: generation 2, world 4 (lost slots " + r + "," +
                                                std::to_string(std::stoi(r) + 1) + ", new slots -)"));
  CHECK_THAT(a.out() + c.out(), Catch::Contains("2 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(a.out() + c.out())));
}

TEST_CASE("reform: with --nnodes=2:3, the node that grew the job lost: the two it joined go on") {
  GrowingJob job("2:3");
  Process& a = *job.a;
  Process& b = *job.b;
  Process& c = *job.c;
  REQUIRE(job.wait_grown());
  c.signal(SIGKILL);
  CHECK(c.wait(10s).has_value());
  const auto ca = a.wait(90s), cb = b.wait(90s);
  INFO("a:\n" << a.err() << a.out() << "b:\n" << b.err() << b.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  CHECK(starts(a.out() + b.out()) == job.before);
  CHECK_THAT(a.err() + b.err(), !Catch::Contains("every node rejoins"));
  CHECK_THAT(a.err() + b.err(),
             Catch::Contains("(group rank 2) lost; no hot spare: the job goes on without ranks 4-5, "
                             "world size 4"));
  CHECK_THAT(a.out() + b.out(),
             Catch::Contains("re-form: generation 2, world 4 (lost slots 4,5, new slots -)"));
  CHECK_THAT(a.out() + b.out(), Catch::Contains("2 re-forms, 0 restarts"));
}

TEST_CASE(
    "reform: in a job whose nodes run 2, 2 and 1 workers, a hot spare of 1 worker takes the lost 1-worker "
    "node's rank 4") {
  MixedJob job;
  Process& s = job.spare(1);
  job.b->signal(SIGKILL);
  CHECK(job.b->wait(10s).has_value());
  const auto ca = job.a->wait(90s), cc = job.c->wait(90s), cs = s.wait(90s);
  const std::string err = job.a->err() + job.c->err();
  const std::string out = job.a->out() + job.c->out() + s.out();
  INFO("a:\n"
       << job.a->err() << job.a->out() << "c:\n"
       << job.c->err() << job.c->out() << "spare:\n"
       << s.err() << s.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cc == std::optional<int>(0));
  CHECK(cs == std::optional<int>(0));
  CHECK(starts(job.a->out() + job.c->out()) == job.before);
  CHECK_THAT(err, Catch::Contains("(group rank 2) lost; hot spare ") &&
                      Catch::Contains(" takes its place (ranks 4)"));
  CHECK_THAT(s.err(), Catch::Contains("this hot spare takes its place: ranks 4 join the running workers"));
  CHECK_THAT(s.out(), Catch::Contains("start: rank 4 of 5, generation 1, joining without state"));
  CHECK(count(s.out(), " start: rank") == 1);
  CHECK_THAT(out, Catch::Contains("re-form: generation 1, world 5 (lost slots -, new slots 4)"));
  CHECK_THAT(out, Catch::Contains("1 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(out)));
}

TEST_CASE(
    "reform: a hot spare of 1 worker does not take the place of a lost 2-worker node: every node rejoins "
    "with it") {
  MixedJob job;
  Process& s = job.spare(1);
  job.c->signal(SIGKILL);  // group rank 1, ranks 2-3
  CHECK(job.c->wait(10s).has_value());
  const auto ca = job.a->wait(120s), cb = job.b->wait(120s), cs = s.wait(120s);
  INFO("a:\n" << job.a->err() << job.a->out() << "b:\n" << job.b->err() << "spare:\n" << s.err() << s.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  CHECK(cs == std::optional<int>(0));
  CHECK_THAT(s.err(), Catch::Contains("hot spare runs 1 worker(s); the place of node ") &&
                          Catch::Contains("(group rank 1) runs 2: not taken, waiting for another"));
  CHECK_THAT(s.err(), !Catch::Contains("this hot spare takes its place"));
  CHECK_THAT(job.a->err(),
             Catch::Contains("(group rank 1) lost; no hot spare and too few nodes left to go on "
                             "without it: every node rejoins"));
  // The next round: a, b and the spare, 4 workers, the spare's one among them.
  CHECK_THAT(s.out(), Catch::Contains(" of 4"));
  CHECK(std::isfinite(final_loss(job.a->out() + job.b->out() + s.out())));
}

TEST_CASE(
    "reform: with --nnodes=2:3 and nodes of 2, 2 and 1 workers, a lost 2-worker node leaves 2 nodes that go "
    "on "
    "with 3 workers") {
  // The workers' minimum is MIN x the smallest count (2 x 1), whichever node decides.
  MixedJob job("2:3");
  Process& a = *job.a;
  Process& b = *job.b;
  job.c->signal(SIGKILL);  // group rank 1, ranks 2-3
  CHECK(job.c->wait(10s).has_value());
  const auto ca = a.wait(90s), cb = b.wait(90s);
  INFO("a:\n" << a.err() << a.out() << "b:\n" << b.err() << b.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  // No worker started again: a's two and b's one kept their processes.
  CHECK(count(a.out(), " start: rank") == 2);
  CHECK(count(b.out(), " start: rank") == 1);
  CHECK_THAT(a.err() + b.err(), !Catch::Contains("every node rejoins") && !Catch::Contains("restarting"));
  CHECK_THAT(
      a.err() + b.err(),
      Catch::Contains("(group rank 1) lost; no hot spare: the job goes on without ranks 2-3, world size 3"));
  CHECK_THAT(a.out() + b.out(),
             Catch::Contains("re-form: generation 1, world 3 (lost slots 2,3, new slots -)"));
  CHECK_THAT(a.out() + b.out(), Catch::Contains("1 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(a.out() + b.out())));
}

TEST_CASE(
    "reform: a node of 2 workers grows a running job whose nodes run 2 and 1 workers: its ranks follow at "
    "3-4") {
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  std::optional<Process> a, b;
  a.emplace(node(dir, daemon, "nodea", "1:3", "2", 2), dir.path(), info_env(), "nodea");
  REQUIRE(wait_until([&] { return count(a->err(), "joined round") > 0; }, 30s));
  b.emplace(node(dir, daemon, "nodeb", "1:3", "2", 1), dir.path(), info_env(), "nodeb");
  REQUIRE(wait_until([&] { return count(a->out() + b->out(), "epoch 1/6") > 0; }, 60s));
  const auto before = starts(a->out() + b->out());
  REQUIRE(before.size() == 3);
  REQUIRE_THAT(b->out(), Catch::Contains("start: rank 2 of 3"));
  Process c(node(dir, daemon, "nodec", "1:3", "2", 2), dir.path(), info_env(), "nodec");
  const auto ca = a->wait(90s), cb = b->wait(90s), cc = c.wait(90s);
  const std::string out = a->out() + b->out() + c.out();
  INFO("a:\n" << a->err() << a->out() << "b:\n" << b->err() << b->out() << "c:\n" << c.err() << c.out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  CHECK(cc == std::optional<int>(0));
  // Before: the newcomer waited beside the job, as a job of mixed counts could not grow.
  CHECK(starts(a->out() + b->out()) == before);
  CHECK_THAT(c.err(), Catch::Contains("this node grows the running job: ranks 3-4 join its workers"));
  CHECK_THAT(c.out(), Catch::Contains("start: rank 3 of 5, generation 1, joining without state"));
  CHECK_THAT(out, Catch::Contains("re-form: generation 1, world 5 (lost slots -, new slots 3,4)"));
  CHECK_THAT(out, Catch::Contains("1 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(out)));
}

TEST_CASE(
    "reform: a node that grew a job after a 1-worker place was given up settles a later loss at the right "
    "ranks") {
  // a, b, c run 2, 1 and 2 workers (ranks 0-1, 2, 3-4). b is lost and the job
  // goes on without rank 2; d (1 worker) then grows it at rank 5, knowing no
  // record of b. When c is lost, d must still place c's ranks at 3-4.
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  std::optional<Process> a, b, c, d;
  start_node(a, dir, daemon, "nodea", 2);
  start_node(b, dir, daemon, "nodeb", 1);
  start_node(c, dir, daemon, "nodec", 2);
  REQUIRE(wait_until([&] { return count(a->out(), "epoch 1/40") > 0; }, 60s));
  REQUIRE_THAT(b->out(), Catch::Contains("start: rank 2 of 5"));
  b->signal(SIGKILL);
  CHECK(b->wait(10s).has_value());
  const auto logs = [&] {
    std::string all;
    for (auto* p : {&a, &c, &d})
      if (*p) all += (*p)->err() + (*p)->out();
    return all;
  };
  const bool shrunk =
      wait_until([&] { return count(logs(), "world 4 (lost slots 2, new slots -)") > 0; }, 60s);
  INFO("a:\n" << a->err() << a->out() << "c:\n" << c->err() << c->out());
  REQUIRE(shrunk);
  start_node(d, dir, daemon, "noded", 1);
  REQUIRE(wait_until([&] { return count(logs(), "world 5 (lost slots -, new slots 5)") > 0; }, 60s));
  c->signal(SIGKILL);
  CHECK(c->wait(10s).has_value());
  const auto ca = a->wait(120s), cd = d->wait(120s);
  INFO("d:\n" << d->err() << d->out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cd == std::optional<int>(0));
  CHECK_THAT(d->err(), Catch::Contains("this node grows the running job: ranks 5 join its workers"));
  // Before ctl/gone/, d knew nothing of b's place and put c's ranks at 2 x 2 = 4-5.
  CHECK_THAT(d->err(),
             Catch::Contains("(group rank 2) lost (its lease expired or was revoked); ranks 3-4 are "
                             "settled after the fence"));
  CHECK_THAT(d->err(), Catch::Contains("the job goes on without ranks 3-4, world size 3"));
  CHECK_THAT(a->out() + d->out(), Catch::Contains("world 3 (lost slots 3,4, new slots -)"));
  CHECK_THAT(a->out() + d->out(), Catch::Contains("3 re-forms, 0 restarts"));
  CHECK_THAT(a->err() + d->err(), !Catch::Contains("every node rejoins"));
  CHECK(std::isfinite(final_loss(a->out() + d->out())));
}

TEST_CASE(
    "reform: two nodes grow a running job of 2 and 1 workers one after the other: the second's ranks follow "
    "the first's") {
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  std::optional<Process> a, b, c, d;
  start_node(a, dir, daemon, "nodea", 2);
  start_node(b, dir, daemon, "nodeb", 1);
  REQUIRE(wait_until([&] { return count(a->out(), "epoch 1/40") > 0; }, 60s));
  REQUIRE_THAT(b->out(), Catch::Contains("start: rank 2 of 3"));
  const auto joined = [&](const std::string& what) {
    return wait_until([&] { return count(a->out() + b->out(), what) > 0; }, 60s);
  };
  start_node(c, dir, daemon, "nodec", 2);
  REQUIRE(joined("world 5 (lost slots -, new slots 3,4)"));
  // d's group rank (3) is past the round's close (2): its ranks follow c's claim of 2 workers.
  start_node(d, dir, daemon, "noded", 1);
  REQUIRE(joined("world 6 (lost slots -, new slots 5)"));
  const auto ca = a->wait(120s), cb = b->wait(120s), cc = c->wait(120s), cd = d->wait(120s);
  INFO("c:\n" << c->err() << c->out() << "d:\n" << d->err() << d->out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  CHECK(cc == std::optional<int>(0));
  CHECK(cd == std::optional<int>(0));
  CHECK_THAT(d->err(), Catch::Contains("this node grows the running job: ranks 5 join its workers"));
  CHECK_THAT(d->out(), Catch::Contains("start: rank 5 of 6"));
  CHECK_THAT(a->out(), Catch::Contains("2 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(a->out())));
}

TEST_CASE(
    "reform: past --rdzv_conf list_nodes_max the nodes read no one's record, and a lost node's ranks are "
    "still "
    "settled right") {
  // Three nodes of 2 workers, list_nodes_max=1: each holds only its own
  // record, as in a job of more than 128 nodes.
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  std::optional<Process> a, b, c;
  start_node(a, dir, daemon, "nodea", 2, "2:3", "30", "6", ",list_nodes_max=1");
  start_node(b, dir, daemon, "nodeb", 2, "2:3", "30", "6", ",list_nodes_max=1");
  start_node(c, dir, daemon, "nodec", 2, "2:3", "30", "6", ",list_nodes_max=1");
  REQUIRE(wait_until([&] { return count(a->out() + c->out(), "epoch 1/6") > 0; }, 60s));
  REQUIRE_THAT(b->out(), Catch::Contains("start: rank 2 of 6"));
  b->signal(SIGKILL);
  CHECK(b->wait(10s).has_value());
  const auto ca = a->wait(90s), cc = c->wait(90s);
  const std::string err = a->err() + c->err();
  INFO("a:\n" << a->err() << a->out() << "c:\n" << c->err() << c->out());
  CHECK(ca == std::optional<int>(0));
  CHECK(cc == std::optional<int>(0));
  CHECK_THAT(err, !Catch::Contains("is not used by ddprun"));
  // Not named (its record was never read), but placed: ranks 2-3.
  // Said once: the reason in the brackets does not name it again.
  CHECK_THAT(err,
             Catch::Contains("reform: the node (group rank 1) lost (its lease expired or was revoked); ranks "
                             "2-3 are settled after the fence"));
  CHECK_THAT(err, Catch::Contains("the job goes on without ranks 2-3, world size 4"));
  CHECK_THAT(a->out() + c->out(),
             Catch::Contains("re-form: generation 1, world 4 (lost slots 2,3, new slots -)"));
  CHECK_THAT(a->out() + c->out(), Catch::Contains("1 re-forms, 0 restarts"));
  CHECK(std::isfinite(final_loss(a->out() + c->out())));
}

namespace {

// After p's and q's job gave a place up (no spare; it went on with 4
// ranks), a fourth node, d, joins (--nnodes=`nnodes`): the job grows back to
// a world of 6 with d's slots 6-7, after every rank the round has had, in
// generation `generation`; p's and q's workers keep the pids `before`. Before,
// d waited as a hot spare for a loss that never came.
void check_regrows(const TempDir& dir, const LocalDaemon& daemon, Process& p, Process& q,
                   const std::set<std::string>& before, const std::string& nnodes,
                   const std::string& last_call, int generation) {
  const auto logs = [&] { return p.err() + p.out() + q.err() + q.out(); };
  std::optional<Process> d;
  d.emplace(node_argv(dir, daemon, "noded", 2, nnodes, last_call, "40"), dir.path(), info_env(), "noded");
  const bool grown =
      wait_until([&] { return count(logs(), "world 6 (lost slots -, new slots 6,7)") > 0; }, 60s);
  INFO("d:\n" << d->err() << d->out() << "\nothers:\n" << logs());
  REQUIRE(grown);
  const auto cp = p.wait(120s), cq = q.wait(120s), cd = d->wait(120s);
  CHECK(cp == std::optional<int>(0));
  CHECK(cq == std::optional<int>(0));
  CHECK(cd == std::optional<int>(0));
  CHECK(starts(p.out() + q.out()) == before);
  CHECK_THAT(p.err() + q.err(), Catch::Contains("admitted into the running job"));
  CHECK_THAT(d->err(), Catch::Contains("this node grows the running job: ranks 6-7 join its workers"));
  CHECK_THAT(d->err(), !Catch::Contains("hot spare"));
  // Slots 6-7 are ranks 4-5 of the 6 (the slots left, in order).
  CHECK_THAT(d->out(), Catch::Contains("slot 6 pid") &&
                           Catch::Contains("start: rank 4 of 6, generation " + std::to_string(generation) +
                                           ", joining without state"));
  CHECK_THAT(p.out() + q.out(), Catch::Contains(std::to_string(generation) + " re-forms, 0 restarts"));
  CHECK_THAT(logs(), !Catch::Contains("every node rejoins"));
  CHECK(std::isfinite(final_loss(p.out() + q.out())));
}

}  // namespace

TEST_CASE(
    "reform: in a job at its --nnodes maximum, a node lost with no spare and given up: a node that joins "
    "later grows the job again") {
  // --nnodes=2:3 with three nodes: the round closes at MAX. b is lost and the
  // job goes on without ranks 2-3. d, the fourth arrival, finds the round at
  // MAX by its arrivals but with a place given up, and grows it.
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  std::optional<Process> a, b, c;
  start_node(a, dir, daemon, "nodea", 2, "2:3", "30");
  start_node(b, dir, daemon, "nodeb", 2, "2:3", "30");
  start_node(c, dir, daemon, "nodec", 2, "2:3", "30");
  REQUIRE(wait_until([&] { return count(a->out() + c->out(), "epoch 1/40") > 0; }, 60s));
  REQUIRE_THAT(b->out(), Catch::Contains("start: rank 2 of 6"));
  const auto before = starts(a->out() + c->out());
  b->signal(SIGKILL);
  CHECK(b->wait(10s).has_value());
  const bool shrunk = wait_until(
      [&] { return count(a->out() + c->out(), "world 4 (lost slots 2,3, new slots -)") > 0; }, 60s);
  INFO("a:\n" << a->err() << a->out() << "c:\n" << c->err() << c->out());
  REQUIRE(shrunk);
  check_regrows(dir, daemon, *a, *c, before, "2:3", "30", 2);
}

TEST_CASE(
    "reform: the node that grew a job to its maximum lost: a node that joins later grows it again, past "
    "that place") {
  // --nnodes=1:3: a and b close the round, c grows it to MAX (group rank 2)
  // and is lost; d is the round's fourth arrival and takes group rank 3.
  TempDir dir;
  LocalDaemon daemon{dir};
  REQUIRE(daemon.port > 0);
  std::optional<Process> a, b, c;
  start_node(a, dir, daemon, "nodea", 2, "1:3", "2");
  start_node(b, dir, daemon, "nodeb", 2, "1:3", "2");
  REQUIRE(wait_until([&] { return count(a->out(), "epoch 1/40") > 0; }, 60s));
  const auto before = starts(a->out() + b->out());
  REQUIRE(before.size() == 4);
  const auto out = [&] { return a->out() + b->out(); };
  INFO("a:\n" << a->err() << a->out() << "b:\n" << b->err() << b->out());
  start_node(c, dir, daemon, "nodec", 2, "1:3", "2");
  REQUIRE(wait_until([&] { return count(out(), "world 6 (lost slots -, new slots 4,5)") > 0; }, 60s));
  c->signal(SIGKILL);
  CHECK(c->wait(10s).has_value());
  REQUIRE(wait_until([&] { return count(out(), "world 4 (lost slots 4,5, new slots -)") > 0; }, 60s));
  check_regrows(dir, daemon, *a, *b, before, "1:3", "2", 3);
}
