// Stragglers named (docs/agent-diagnosis.md, "Stragglers"): real ddprun agents and a
// real ddp-rendezvousd, Python workers timing a "step" section with
// ddprun.liveness; one rank sleeps ten times longer per step. Factors are
// wide (10x slow against a bar of 3x) so a loaded machine does not blur them.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Steps of 0.15 s (SLOW_RANK's of 1.5 s) until STOP_FILE exists, or STEPS
// steps when set; after a restart, 20 steps of 0.15 s for every rank.
constexpr const char* kWorker = R"(import os, time
from ddprun import liveness
rank = int(os.environ["RANK"])
restarted = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
step_s = 1.5 if rank == int(os.environ.get("SLOW_RANK", "-1")) and not restarted else 0.15
steps = 20 if restarted else int(os.environ.get("STEPS", "0"))
deadline = time.monotonic() + 120
done = 0
while time.monotonic() < deadline and not os.path.exists(os.environ["STOP_FILE"]):
    with liveness.section("step"):
        time.sleep(step_s)
    done += 1
    if steps and done >= steps:
        break
)";

std::vector<json> events_named(const fs::path& path, const std::string& name) {
  std::vector<json> out;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    const auto e = json::parse(line, nullptr, false);
    if (e.is_object() && e.value("event", "") == name) out.push_back(e);
  }
  return out;
}

struct Job {
  explicit Job(const TempDir& d) : dir(d) { write_file(dir / "worker.py", kWorker); }
  // One agent of `nnodes` with `nproc` workers.
  std::vector<std::string> agent(int nnodes, int nproc, const std::string& events,
                                 std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"--nnodes=" + std::to_string(nnodes),
                                     "--nproc_per_node=" + std::to_string(nproc),
                                     "--rdzv_backend=c10d",
                                     "--rdzv_endpoint=" + daemon.endpoint,
                                     "--rdzv_id=strag",
                                     "--straggler_factor=3",
                                     "--straggler_steps=3",
                                     "--stop_timeout=2",
                                     "--event_log=" + (dir / events).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    for (std::string a : {"--no_python", "python3"}) args.push_back(a);
    args.push_back((dir / "worker.py").string());
    return ddprun_argv(std::move(args));
  }
  EnvOverrides env(int slow_rank, int steps = 0) const {
    return clean_env({{"PYTHONPATH", (source_dir() / "python").string()},
                      {"SLOW_RANK", std::to_string(slow_rank)},
                      {"STEPS", std::to_string(steps)},
                      {"STOP_FILE", (dir / "stop").string()}});
  }
  RunResult status() const { return store_status(dir, daemon.endpoint, "strag"); }
  std::string verdict() const {
    return run({bin("ddp-store").string(), "--endpoint", daemon.endpoint, "get", "/strag/agent/stragglers"},
               dir.path())
        .out;
  }
  const TempDir& dir;
  LocalDaemon daemon{dir};
};

// The agent's node id, as its event log's rendezvous line gives it.
std::string node_of(const fs::path& events) {
  const auto rdzv = events_named(events, "rendezvous");
  return rdzv.empty() ? "?" : rdzv.back().at("node").get<std::string>();
}

// The "straggler" event names `rank` on `node` with numbers that add up.
void check_named(const json& e, int rank, const std::string& node) {
  INFO(e.dump());
  CHECK(e.at("rank") == rank);
  CHECK(e.at("straggler_node") == node);
  const double step = e.at("step_s").get<double>();
  const double median = e.at("median_s").get<double>();
  CHECK(step > 1.0);  // the slow rank's 1.5 s steps
  CHECK(median > 0.1);
  CHECK(median < 0.8);  // the others' 0.15 s steps, with room for a loaded machine
  CHECK(e.at("factor").get<double>() == Approx(step / median));
  CHECK(e.at("factor").get<double>() > 3);
  CHECK(e.at("threshold") == 3.0);
  CHECK(e.at("steps").get<int>() >= 3);
}

// Writes `verdict` as the job's straggler verdict ten times a second, as a
// client holding the job's token could, until destroyed: the deciding agent
// overwrites it every status interval, the forger writes it again.
struct Forger {
  Forger(const Job& job, const std::string& verdict)
      : proc({"/bin/sh", "-c",
              "while :; do \"$STORE\" --endpoint \"$EP\" set /strag/agent/stragglers \"$V\" >/dev/null 2>&1; "
              "sleep 0.1; done"},
             job.dir.path(),
             {{"STORE", bin("ddp-store").string()}, {"EP", job.daemon.endpoint}, {"V", verdict}}, "forger") {}
  Process proc;
};

}  // namespace

TEST_CASE("a rank ten times slower than the other three is named with its node and numbers") {
  TempDir dir;
  Job job(dir);
  Process agent(job.agent(1, 4, "events.jsonl"), dir.path(), job.env(2), "agent");
  REQUIRE(wait_until([&] { return !events_named(dir / "events.jsonl", "straggler").empty(); }, 60s));
  const auto named = events_named(dir / "events.jsonl", "straggler");
  REQUIRE(named.size() == 1);
  check_named(named[0], 2, node_of(dir / "events.jsonl"));
  CHECK_FALSE(named[0].at("straggler_host").get<std::string>().empty());

  RunResult table;
  const bool shown = wait_until(
      [&] {
        table = job.status();
        return table.out.find("rank 2") != std::string::npos;
      },
      20s);
  INFO(table.out << table.err);
  CHECK(shown);
  CHECK_THAT(table.out, Catch::Contains("STRAGGLER") && Catch::Contains("MEDIAN_S"));
  write_file(dir / "stop", "");
  CHECK(agent.wait(30s) == 0);
  const std::string err = agent.err();
  INFO(err);
  CHECK_THAT(err, Catch::Contains("straggler rank=2 node=") && Catch::Contains("x the job's median"));
  CHECK(count_lines(err, "straggler rank=") == 1);
}

TEST_CASE("four ranks of even step times name nobody") {
  TempDir dir;
  Job job(dir);
  // 120 steps of 0.15 s: several status intervals of comparisons.
  Process agent(job.agent(1, 4, "events.jsonl"), dir.path(), job.env(-1, 120), "agent");
  // The deciding agent compared all four ranks at least once.
  std::string verdict;
  const bool decided = wait_until(
      [&] {
        verdict = job.verdict();
        return verdict.find("\"ranks\":4") != std::string::npos;
      },
      60s);
  CHECK(agent.wait(60s) == 0);
  const std::string err = agent.err();
  INFO(verdict << err);
  CHECK(decided);
  CHECK_THAT(verdict, Catch::Contains("\"stragglers\":[]"));
  CHECK(events_named(dir / "events.jsonl", "straggler").empty());
  CHECK_THAT(err, !Catch::Contains("straggler rank="));
}

TEST_CASE("a slow rank on the other node is named in both nodes' logs, event logs and status records") {
  TempDir dir;
  Job job(dir);
  // Two agents, two workers each: ranks 2-3 are on the second node to join,
  // never the deciding agent's (group rank 0, ranks 0-1).
  Process a(job.agent(2, 2, "events_a.jsonl"), dir.path(), job.env(3), "node_a");
  Process b(job.agent(2, 2, "events_b.jsonl"), dir.path(), job.env(3), "node_b");
  const auto named_in = [&](const char* log) { return !events_named(dir / log, "straggler").empty(); };
  REQUIRE(wait_until([&] { return named_in("events_a.jsonl") && named_in("events_b.jsonl"); }, 60s));
  // The slow rank's node: the agent whose rendezvous gave it rank offset 2.
  const auto rdzv_a = events_named(dir / "events_a.jsonl", "rendezvous");
  REQUIRE(!rdzv_a.empty());
  const std::string node_a = node_of(dir / "events_a.jsonl");
  const std::string node_b = node_of(dir / "events_b.jsonl");
  const std::string slow_node = rdzv_a.back().at("rank_offset") == 2 ? node_a : node_b;
  for (const char* log : {"events_a.jsonl", "events_b.jsonl"}) {
    const auto e = events_named(dir / log, "straggler").front();
    check_named(e, 3, slow_node);
    CHECK(e.at("node") == node_of(dir / log));  // the node that wrote the line
  }
  // Each node's status record names it: SEEN_BY lists both nodes.
  RunResult table;
  const bool seen_by_both = wait_until(
      [&] {
        table = job.status();
        const auto row = table.out.find("rank 3");
        if (row == std::string::npos) return false;
        const auto line = table.out.substr(row, table.out.find('\n', row) - row);
        const auto seen_by = line.substr(line.find_last_of(' ') + 1);
        return seen_by.find(node_a) != std::string::npos && seen_by.find(node_b) != std::string::npos;
      },
      20s);
  INFO(table.out << table.err);
  CHECK(seen_by_both);
  write_file(dir / "stop", "");
  CHECK(a.wait(30s) == 0);
  CHECK(b.wait(30s) == 0);
  CHECK_THAT(a.err(), Catch::Contains("straggler rank=3 node="));
  CHECK_THAT(b.err(), Catch::Contains("straggler rank=3 node="));
}

TEST_CASE("with --straggler_action=restart the slow rank is killed as a failure and the restart finishes") {
  TempDir dir;
  Job job(dir);
  Process agent(job.agent(1, 4, "events.jsonl", {"--straggler_action=restart", "--max_restarts=1"}),
                dir.path(), job.env(2), "agent");
  const auto code = agent.wait(90s);
  const std::string err = agent.err();
  INFO(err);
  CHECK(code == 0);
  CHECK_THAT(err, Catch::Contains("straggler rank=2 node="));
  CHECK_THAT(err, Catch::Contains("worker killed as a straggler rank=2 local_rank=2"));
  CHECK_THAT(err, Catch::Contains("straggler named (step "));
  CHECK_THAT(err, Catch::Contains("restarting workers (1/1) after failure of rank 2"));
  const auto named = events_named(dir / "events.jsonl", "straggler");
  REQUIRE(named.size() == 1);
  check_named(named[0], 2, node_of(dir / "events.jsonl"));
  CHECK(events_named(dir / "events.jsonl", "restart").size() == 1);
}

TEST_CASE("a forged straggler verdict kills no healthy rank, whoever it claims wrote it") {
  // list_nodes_max=0: as in a round past 128 nodes, node b reads no record at
  // the close, and learns which node decides from group rank 0's record when
  // a verdict comes.
  const std::string conf = GENERATE(as<std::string>{}, "", "--rdzv_conf=list_nodes_max=0");
  INFO("rdzv_conf: " << conf);
  TempDir dir;
  Job job(dir);
  // Four ranks of even 0.15 s steps on two nodes, --straggler_action=restart.
  // The deciding node (the first to join) compares nothing (factor 0), so it
  // never overwrites the verdict key: what the other node reads is the forger's.
  std::vector<std::string> restart = {"--straggler_action=restart", "--max_restarts=1"};
  if (!conf.empty()) restart.push_back(conf);
  std::vector<std::string> quiet = restart;
  quiet.push_back("--straggler_factor=0");
  Process a(job.agent(2, 2, "events_a.jsonl", quiet), dir.path(), job.env(-1), "node_a");
  REQUIRE(wait_until([&] { return a.err().find("joined round") != std::string::npos; }, 30s));
  Process b(job.agent(2, 2, "events_b.jsonl", restart), dir.path(), job.env(-1), "node_b");
  const fs::path events_b = dir / "events_b.jsonl";
  REQUIRE(wait_until([&] { return !events_named(events_b, "rendezvous").empty(); }, 30s));
  REQUIRE(events_named(events_b, "rendezvous").back().at("rank_offset") == 2);
  // Node a may learn of the close after node b, which closed it: its event can come later.
  REQUIRE(wait_until([&] { return !events_named(dir / "events_a.jsonl", "rendezvous").empty(); }, 30s));
  const std::string decider = node_of(dir / "events_a.jsonl");
  const std::string node_b = node_of(events_b);
  // Node b has measured its ranks' step times (its status record shows them).
  REQUIRE(wait_until(
      [&] {
        const auto record = run({bin("ddp-store").string(), "--endpoint", job.daemon.endpoint, "get",
                                 "/strag/agent/status/" + node_b},
                                dir.path());
        return record.out.find("\"step_s\"") != std::string::npos;
      },
      60s));
  // Rank 2 (node b's) named at 9.5 s a step against a median of 0.15 s.
  json forged = {{"round", 0},
                 {"ranks", 4},
                 {"median_s", 0.15},
                 {"factor", 3.0},
                 {"steps", 3},
                 {"stragglers", json::array({json{{"rank", 2},
                                                  {"node", node_b},
                                                  {"host", "node1"},
                                                  {"step_s", 9.5},
                                                  {"median_s", 0.15},
                                                  {"factor", 63.3},
                                                  {"steps", 10}}})}};
  {
    // Written as by a node that does not decide the round.
    forged["by"] = "intruder_4242";
    Forger forger(job, forged.dump());
    const bool ignored = wait_until(
        [&] { return b.err().find("ignoring a straggler verdict of round") != std::string::npos; }, 30s);
    INFO(b.err());
    REQUIRE(ignored);
  }
  {
    // Written as by the deciding node, with a step time node b does not measure.
    forged["by"] = decider;
    Forger forger(job, forged.dump());
    const bool refused = wait_until(
        [&] { return b.err().find("not acting on the straggler verdict for rank=2") != std::string::npos; },
        30s);
    INFO(b.err());
    REQUIRE(refused);
  }
  write_file(dir / "stop", "");
  CHECK(a.wait(30s) == 0);
  CHECK(b.wait(30s) == 0);
  const std::string err = b.err();
  INFO(err);
  CHECK_THAT(err,
             Catch::Contains("by=intruder_4242: the round's deciding node (group rank 0) is " + decider));
  CHECK_THAT(
      err, Catch::Contains("its step time here is 0.") && Catch::Contains("not 9.500 s as the verdict says"));
  CHECK_THAT(err, !Catch::Contains("worker killed as a straggler") && !Catch::Contains("restarting workers"));
  CHECK(events_named(events_b, "straggler").empty());
  CHECK(events_named(events_b, "straggler_refused").size() == 1);
}
