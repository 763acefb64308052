// The job listing derived from a job's keys (JobScan, JobAccumulator) and the
// job log (JobLog), on a KvState filled as ddprun's agents and handlers fill it.
#include "job_scan.hpp"

#include <catch2/catch.hpp>
#include <chrono>

#include "job_log.hpp"

using namespace ddp::store;
using namespace ddp::store::server;

namespace {

constexpr double kNow = 1.8e9;

struct Keys {
  KvState kv;
  Revision rev = 0;
  void put(const std::string& key, const std::string& value, LeaseId lease = 0) {
    kv.restore_put(key, value, ++rev, lease);
  }
  // A node's status record as Observers writes it.
  void status(const std::string& run, const std::string& node, std::int64_t group_rank, std::int64_t round,
              const std::string& state, std::int64_t restarts, std::vector<double> steps = {0.2, 0.2},
              const std::string& host = "h") {
    std::string workers;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto rank = group_rank * static_cast<std::int64_t>(steps.size()) + static_cast<std::int64_t>(i);
      workers += std::string(workers.empty() ? "" : ",") + R"({"rank":)" + std::to_string(rank) +
                 R"(,"state":"running","step_s":)" + std::to_string(steps[i]) + R"(,"heartbeat_age_s":0.5})";
    }
    put("/" + run + "/agent/status/" + node,
        R"({"node":")" + node + R"(","host":")" + host + R"(","state":")" + state + R"(","round":)" +
            std::to_string(round) + R"(,"group_rank":)" + std::to_string(group_rank) +
            R"(,"group_world_size":2,"rank_first":0,"rank_last":1,"restart_count":)" +
            std::to_string(restarts) + R"(,"max_restarts":3,"updated":)" + std::to_string(kNow) +
            R"(,"workers":[)" + workers + "]}");
  }
};

JobsReport scan(const KvState& kv, JobQuery q = {}, const JobLog* log = nullptr,
                std::size_t* steps = nullptr) {
  JobLog none(false);
  JobScan s(std::move(q), kNow);
  std::size_t n = 1;
  while (!s.step(kv, log ? *log : none)) ++n;
  if (steps) *steps = n;
  return s.take();
}

const JobSummary& only(const JobsReport& r) {
  REQUIRE(r.jobs.size() == 1);
  return r.jobs[0];
}

}  // namespace

namespace {

// The life of job "j" on two nodes, a step at a time: each adds its keys to
// what the steps before it wrote.
void round_0_forming(Keys& k) {
  k.put("/j/rdzv/nnodes", "2:2");
  k.put("/j/rdzv/round_0/seq", "x");
  k.put("/j/rdzv/round_0/node/0", R"({"id":"a","host":"h1","nproc":4})", 7);
}
void round_0_running(Keys& k) {
  round_0_forming(k);
  k.put("/j/rdzv/round_0/node/1", R"({"id":"b","host":"h2","nproc":4})", 8);
  k.put("/j/rdzv/round_0/closed", "2 8 12");
  k.status("j", "a", 0, 0, "running", 0);
  k.status("j", "b", 1, 0, "running", 0, {0.2, 0.6});
}
// A worker fails: the round ends.
void round_0_failed(Keys& k) {
  round_0_running(k);
  k.put("/j/rdzv/round_0/ctl/ended", "0 node a reported a failure: rank 1 on h1: exit code 1");
}
// The next one forms.
void round_1_forming(Keys& k) {
  round_0_failed(k);
  k.put("/j/rdzv/round", "1");
}
void round_1_running(Keys& k) {
  round_1_forming(k);
  k.put("/j/rdzv/round_1/node/0", R"({"id":"a","host":"h1","nproc":4})", 7);
  k.put("/j/rdzv/round_1/node/1", R"({"id":"b","host":"h2","nproc":4})", 8);
  k.put("/j/rdzv/round_1/closed", "2 8 30");
  k.status("j", "a", 0, 1, "running", 1);
}

}  // namespace

TEST_CASE("a job's row while round 0 forms: its run, backend, nnodes, and the nodes and ranks so far") {
  Keys k;
  round_0_forming(k);
  const auto s = only(scan(k.kv));
  CHECK(s.run_id == "j");
  CHECK(s.backend == "c10d");
  CHECK(s.nnodes == "2:2");
  CHECK(s.state == JobState::kForming);
  CHECK(s.round == 0);
  CHECK(s.nodes == 1);
  CHECK(s.ranks == 4);
}

TEST_CASE("a job's row once formed: running, every node and rank, no restart yet, the slowest step") {
  Keys k;
  round_0_running(k);
  const auto s = only(scan(k.kv));
  CHECK(s.state == JobState::kRunning);
  CHECK(s.nodes == 2);
  CHECK(s.ranks == 8);
  CHECK(s.restarts == 0);
  CHECK(s.max_restarts == 3);
  CHECK(s.step_s == Approx(0.2));
  CHECK(s.status_records == 2);
  CHECK(s.stragglers == -1);
}

TEST_CASE("a job's row after a worker failed: restarting, the round's end its last failure") {
  Keys k;
  round_0_failed(k);
  const auto s = only(scan(k.kv));
  CHECK(s.state == JobState::kRestarting);
  CHECK(s.last_failure == "node a reported a failure: rank 1 on h1: exit code 1");
}

TEST_CASE("a job's row while the next round forms: restarting in that round, with no node yet") {
  Keys k;
  round_1_forming(k);
  const auto s = only(scan(k.kv));
  CHECK(s.state == JobState::kRestarting);
  CHECK(s.round == 1);
  CHECK(s.nodes == 0);
}

TEST_CASE("a job's row once the next round formed: running again, one restart counted") {
  Keys k;
  round_1_running(k);
  const auto s = only(scan(k.kv));
  CHECK(s.state == JobState::kRunning);
  CHECK(s.restarts == 1);
  CHECK(s.round == 1);
}

TEST_CASE("a job's failure report, once written, is its last failure") {
  Keys k;
  round_1_running(k);
  k.put("/j/agent/failure/a",
        R"x({"summary":"rank 1 on h1: exit code 1 (ValueError: bad batch)","time":1.7e9,)x"
        R"("host":"h1","round":0,"rank":1})");
  const auto s = only(scan(k.kv));
  CHECK(s.last_failure == "rank 1 on h1: exit code 1 (ValueError: bad batch)");
  CHECK(s.last_failure_time == 1.7e9);
}

TEST_CASE("a job's end: succeeded, failed, stopped by a signal, or left by every member") {
  Keys k;
  for (const char* run : {"ok", "bad", "term", "gone"}) {
    const std::string r = run;
    k.put("/" + r + "/rdzv/round_0/closed", "1 2 5");
    k.put("/" + r + "/rdzv/round_0/node/0", R"({"id":"a","host":"h","nproc":2})", r == "gone" ? 0 : 3);
  }
  k.put("/ok/rdzv/round_0/done", "1");
  k.put("/bad/rdzv/closed", "workers failed and max_restarts=0 is spent (closed by node a)");
  k.put("/term/rdzv/closed", "agent on h stopped by SIGTERM (closed by node a)");
  const auto r = scan(k.kv);
  REQUIRE(r.jobs.size() == 4);
  CHECK(r.jobs[0].run_id == "bad");
  CHECK(r.jobs[0].state == JobState::kFailed);
  CHECK(r.jobs[0].last_failure == "workers failed and max_restarts=0 is spent (closed by node a)");
  CHECK(r.jobs[1].run_id == "gone");
  CHECK(r.jobs[1].state == JobState::kStopped);
  CHECK(r.jobs[2].run_id == "ok");
  CHECK(r.jobs[2].state == JobState::kSucceeded);
  CHECK(r.jobs[3].run_id == "term");
  CHECK(r.jobs[3].state == JobState::kStopped);
}

TEST_CASE("a static job is formed once all N nodes joined, and keys of other programs make no job") {
  Keys k;
  k.put("/s/rdzv/round_0/nnodes", "2 0 a");
  k.put("/s/rdzv/round_0/node/0", R"({"id":"a","host":"h","nproc":3})", 5);
  CHECK(only(scan(k.kv)).state == JobState::kForming);
  k.put("/s/rdzv/round_0/node/1", R"({"id":"b","host":"h","nproc":3})", 6);
  const auto s = only(scan(k.kv));
  CHECK(s.backend == "static");
  CHECK(s.nnodes == "2");
  CHECK(s.state == JobState::kRunning);
  CHECK(s.ranks == 6);
  // Not ddprun's: a plain TCPStore user's keys, a key of no known area, a lone verdict.
  k.put("foo", "bar");
  k.put("/other/x", "y");
  k.put("/t/agent/stragglers", "not json");
  k.put("/t/worker/round_0/k", "v");
  CHECK(scan(k.kv).jobs.size() == 1);
}

TEST_CASE("unhealthy nodes, spares, excluded hosts and the current round's stragglers are counted") {
  Keys k;
  k.put("/j/rdzv/round", "3");
  k.put("/j/rdzv/round_3/closed", "1 4 9");
  k.put("/j/rdzv/round_3/node/0", R"({"id":"a","host":"h","nproc":4})", 2);
  k.put("/j/rdzv/round_3/spare/s1", R"({"id":"s1","host":"hs","nproc":4})", 3);
  k.put("/j/rdzv/round_2/spare/s0", R"({"id":"s0","host":"hs","nproc":4})", 4);  // an older round's
  k.put("/j/rdzv/excluded/bad1", "2 worker failures");
  k.put("/j/agent/status/u", R"({"state":"unhealthy: GPU 3 fell off the bus","workers":[]})");
  k.put("/j/agent/status/v", R"({"state":"running","note":"was unhealthy once"})");
  k.put("/j/agent/status/w", "unhealthy, but not a record");
  k.put("/j/agent/stragglers", R"({"round":3,"stragglers":[{"rank":5},{"rank":9}]})");
  auto s = only(scan(k.kv));
  CHECK(s.spares == 1);
  CHECK(s.excluded == 1);
  CHECK(s.unhealthy == 1);
  CHECK(s.status_records == 3);
  CHECK(s.stragglers == 2);
  k.put("/j/agent/stragglers", R"({"round":2,"stragglers":[{"rank":5}]})");
  CHECK(only(scan(k.kv)).stragglers == 0);
}

TEST_CASE(
    "a job's detail: nodes a page at a time by group rank, with their ranks, and failures newest first") {
  Keys k;
  k.put("/j/rdzv/round_0/closed", "250 500 9");
  for (int g = 0; g < 250; ++g) {
    char node[16];
    std::snprintf(node, sizeof node, "n%03d", 249 - g);  // key order is the reverse of group rank order
    k.status("j", node, g, 0, "running", 0, {0.1, 0.1});
  }
  for (int i = 0; i < 40; ++i) {
    k.put("/j/agent/failure/n" + std::to_string(i),
          R"({"summary":"failure )" + std::to_string(i) + R"(","time":)" + std::to_string(1000 + i) +
              R"(,"hang":{"what":"heartbeat missed","frames":["train.py:12 in step"]}})");
  }
  const auto r = scan(k.kv, JobQuery{"j", true, 100, 100});
  REQUIRE(r.detail);
  const auto& d = *r.detail;
  CHECK(d.nodes_total == 250);
  REQUIRE(d.nodes.size() == 100);
  CHECK(d.nodes.front().group_rank == 100);
  CHECK(d.nodes.back().group_rank == 199);
  CHECK(d.nodes.front().node_id == "n149");
  REQUIRE(d.nodes.front().ranks.size() == 2);
  CHECK(d.nodes.front().ranks[0].step_s == Approx(0.1));
  CHECK(d.failures_total == 40);
  REQUIRE(d.failures.size() == kMaxFailuresShown);
  CHECK(d.failures.front().summary == "failure 39");
  CHECK(d.failures.front().hang == "heartbeat missed");
  CHECK(d.failures.front().frames == std::vector<std::string>{"train.py:12 in step"});
  CHECK(r.detail->summary.last_failure == "failure 39");
}

TEST_CASE("a record that is not JSON, too deep, or of the wrong shape costs its own row only") {
  Keys k;
  k.put("/j/rdzv/round_0/closed", "3 3 1");
  k.put("/j/agent/status/deep", std::string(100000, '[') + std::string(100000, ']'));
  k.put("/j/agent/status/junk", "{\"state\":");
  k.put("/j/agent/status/types", R"({"state":7,"round":"x","workers":{"a":1},"restart_count":1.5e300})");
  k.status("j", "ok", 0, 0, "running", 2);
  const auto r = scan(k.kv, JobQuery{"j", true, 0, 100});
  const auto& s = only(r);
  CHECK(s.status_records == 4);
  CHECK(s.restarts == 2);
  REQUIRE(r.detail);
  int unreadable = 0;
  for (const auto& n : r.detail->nodes) unreadable += n.problem.empty() ? 0 : 1;
  CHECK(unreadable == 2);
}

TEST_CASE("the walk reads in bounded slices and skips workers' keys with a seek") {
  Keys k;
  k.put("/big/rdzv/round_0/closed", "3000 24000 1");
  for (int g = 0; g < 3000; ++g) {
    std::string node = "n";
    node += std::to_string(g);
    k.status("big", node, g, 0, "running", 0, {0.1, 0.3});
  }
  for (int i = 0; i < 50000; ++i) k.put("/big/worker/round_0/k" + std::to_string(i), "v");
  k.put("/small/rdzv/round_0/closed", "1 1 1");
  std::size_t steps = 0;
  const auto r = scan(k.kv, {}, nullptr, &steps);
  REQUIRE(r.jobs.size() == 2);
  CHECK(r.jobs[0].status_records == 3000);
  CHECK(r.jobs[0].step_s == Approx(0.3));
  // 3000 records of ~300 bytes: a few slices of 128 KiB; the 50,000 worker keys cost none.
  CHECK(steps > 3);
  CHECK(steps < 20);

  // Keys added and removed between slices: the walk goes on from where it was.
  JobLog log(false);
  JobScan s(JobQuery{}, kNow);
  CHECK_FALSE(s.step(k.kv, log));
  k.kv.restore_erase("/big/agent/status/n2999");
  k.put("/aaa/rdzv/round_0/closed", "1 1 1");  // before the cursor: not seen this time
  k.put("/zzz/rdzv/round_0/closed", "1 1 1");  // after it: seen
  while (!s.step(k.kv, log)) {
  }
  const auto later = s.take();
  REQUIRE(later.jobs.size() == 3);
  CHECK(later.jobs[0].run_id == "big");
  CHECK(later.jobs[2].run_id == "zzz");
}

TEST_CASE("the job log names each step of a job's life and keeps a few events per job") {
  Keys k;
  JobLog log(false);
  const auto commit = [&](const std::string& key, const std::string& value, LeaseId prev = 0) {
    k.put(key, value);
    Mutation m;
    m.changes.push_back({Change::Kind::kPut, key, value, 0, prev, 0});
    log.on_commit(m, k.kv, kNow);
  };
  commit("/j/rdzv/round_0/closed", "2 8 5");
  commit("/j/rdzv/round_0/ctl/ended", "0 node a reported a failure: rank 3 on h: exit code 1");
  commit("/j/rdzv/round_1/closed", "2 8 9");
  commit("/j/rdzv/round_1/done", "1");
  const auto* life = log.find("j");
  REQUIRE(life != nullptr);
  CHECK(life->first_seen == kNow);
  CHECK(life->last_failure_time == kNow);
  REQUIRE(life->events.size() == 4);
  CHECK(life->events[0].text == "job formed round=0 nodes=2 ranks=8");
  CHECK(life->events[2].text ==
        "job restarted round=1 nodes=2 ranks=8 why=\"restart_requested: node a reported a failure: rank 3 on "
        "h: "
        "exit code 1\"");
  CHECK(life->events[3].text == "job succeeded round=1");
  commit("/k/rdzv/closed", "agent on h stopped by SIGTERM");
  CHECK(log.find("k")->events.back().text == "job stopped reason=\"agent on h stopped by SIGTERM\"");
  // A hostile run id and reason are kept escaped.
  commit("/\x1b[2J<b>/rdzv/closed", "bad\x07\n<script>");
  CHECK(log.find("\x1b[2J<b>")->events.back().text == "job failed reason=\"bad\\x07\\n<script>\"");
  for (int i = 0; i < 50; ++i) commit("/j/rdzv/round_" + std::to_string(i + 2) + "/closed", "2 8 1");
  CHECK(log.find("j")->events.size() == JobLog::kMaxEvents);
  log.reclaimed("j", 10);
  CHECK(log.find("j") == nullptr);
  // Jobs whose keys a client deleted are forgotten at the next prune.
  k.kv.restore_erase("/k/rdzv/closed");
  log.prune(k.kv);
  CHECK(log.find("k") == nullptr);
  CHECK(log.find("\x1b[2J<b>") != nullptr);
}

TEST_CASE("numbers at the ends of their range in hostile keys neither overflow nor stop the listing") {
  Keys k;
  k.put("/j/rdzv/round", "9223372036854775807");
  k.put("/j/rdzv/round_9223372036854775807/node/0", R"({"nproc":9223372036854775807})", 1);
  k.put("/j/rdzv/round_9223372036854775807/node/1", R"({"nproc":9223372036854775807})", 2);
  k.put("/j/rdzv/round_9223372036854775806/closed", "9223372036854775807 9223372036854775807 1");
  k.put("/j/agent/status/n", R"({"restart_count":9223372036854775807,"updated":1e308,"workers":[)"
                             R"({"state":"running","heartbeat_age_s":1e308,"step_s":-1e308}]})");
  const auto s = only(scan(k.kv));
  CHECK(s.round == INT64_MAX);
  CHECK(s.nodes == 2);
  CHECK(s.ranks == 2 * (std::int64_t{1} << 24));
  CHECK(s.restarts == INT64_MAX);
  CHECK(s.heartbeat_age_max_s <= 1e12);
}
