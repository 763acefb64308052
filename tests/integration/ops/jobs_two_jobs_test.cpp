// What an operator sees of two real ddprun jobs on one daemon, one case per
// view: "steady" (two nodes of two workers that run until stopped) and
// "crashy" (one node whose workers fail with an error message, restarting
// again and again), then both stopped and reclaimed. The run happens once:
// under ctest the fixture "ddp_integration_ops:two real jobs" saves what each
// view showed in $DDP_OPS_TWO_JOBS, a directory, and the cases read it back.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "../launcher/launcher_test_util.hpp"
#include "jobs_support.hpp"
#include "ops_support.hpp"

using namespace ddp::test;
using namespace ddp::test::jobs;
using namespace std::chrono_literals;

namespace {

// Each view as the operator got it, by name ("table.out", "page.status"...).
SavedRun run_two_jobs() {
  SavedRun v;
  TempDir dir;
  ProcessTag tag;
  Daemon d(dir, {"--reclaim-idle-jobs-ms", "3000"});
  const auto agent = [&](const std::string& run_id, const std::string& name, std::vector<std::string> flags,
                         launcher::EnvOverrides env) {
    std::vector<std::string> args = {"--rdzv_backend=c10d", "--rdzv_endpoint=" + d.endpoint,
                                     "--rdzv_id=" + run_id, "--log_level=warn",
                                     "--rdzv_conf=join_timeout=60"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--no_python", bin("fake_worker").string()});
    env.insert(tag.env());
    return std::make_unique<Process>(launcher::ddprun_argv(args), dir.path(), launcher::clean_env(env), name);
  };
  auto a = agent("steady", "a", {"--nnodes=2", "--nproc_per_node=2"}, {{"FAKE_HANG", "1"}});
  auto b = agent("steady", "b", {"--nnodes=2", "--nproc_per_node=2"}, {{"FAKE_HANG", "1"}});
  auto c =
      agent("crashy", "c", {"--nnodes=1", "--nproc_per_node=2", "--max_restarts=100000"},
            {{"FAKE_EXIT", "3"}, {"FAKE_SLEEP_MS", "200"}, {"FAKE_ERROR_MESSAGE", "loss is nan at step 7"}});
  const auto logs = [&] {
    return "daemon log:\n" + read_file(dir / "daemon.log") + "\na:\n" + a->err() + "\nc:\n" + c->err();
  };
  nlohmann::json jobs;
  const bool seen = wait_until(
      [&] {
        jobs = jobs_json(d, dir);
        const auto* s = job(jobs, "steady");
        const auto* x = job(jobs, "crashy");
        return s && x && s->value("state", "") == "running" && s->value("nodes", 0) == 2 &&
               (*x)["restarts"].is_number() && (*x)["restarts"].get<int>() >= 2 &&
               x->value("last_failure", "").find("exit code 3") != std::string::npos;
      },
      60s);
  INFO(jobs.dump(2) << "\n" << logs());
  REQUIRE(seen);
  v["steady.json"] = job(jobs, "steady")->dump();
  v["crashy.json"] = job(jobs, "crashy")->dump();
  const auto table = d.store({"jobs"}, dir);
  v["table.code"] = std::to_string(table.code);
  v["table.out"] = table.out;
  const auto one = d.store({"jobs", "--rdzv_id", "steady"}, dir);
  v["one.code"] = std::to_string(one.code);
  v["one.out"] = one.out;
  const auto none = d.store({"jobs", "--rdzv_id", "nope"}, dir);
  v["none.code"] = std::to_string(none.code);
  v["none.err"] = none.err;
  v["metrics"] = http_get(d.mport, "/metrics").body;
  const auto page = http_get(d.mport, "/");
  v["page.status"] = std::to_string(page.status);
  v["page.body"] = page.body;
  v["page.headers"] = page.headers;
  const auto failing = http_get(d.mport, "/job?id=crashy");
  v["failing.status"] = std::to_string(failing.status);
  v["failing.body"] = failing.body;
  v["nodes.body"] = http_get(d.mport, "/job?id=steady").body;
  v["nope.status"] = std::to_string(http_get(d.mport, "/job?id=nope").status);
  v["bad_id.status"] = std::to_string(http_get(d.mport, "/job?id=%zz").status);
  v["api.body"] = http_get(d.mport, "/api/jobs").body;
  v["log"] = read_file(dir / "daemon.log");

  // Stopped; then reclaimed, and its series go with its keys.
  for (auto* p : {a.get(), b.get(), c.get()}) p->signal(SIGTERM);
  bool ended = true;
  for (auto* p : {a.get(), b.get(), c.get()}) ended = p->wait(30s).has_value() && ended;
  v["agents_ended"] = ended ? "1" : "0";
  const bool reclaimed = wait_until(
      [&] {
        const auto l = read_file(dir / "daemon.log");
        return l.find("job reclaimed run_id=steady") != std::string::npos &&
               l.find("job reclaimed run_id=crashy") != std::string::npos;
      },
      30s);
  v["reclaimed"] = reclaimed ? "1" : "0";
  v["log_after"] = read_file(dir / "daemon.log");
  v["metrics_after"] = http_get(d.mport, "/metrics").body;
  v["all_gone"] = tag.all_gone(10s) ? "1" : "0";
  d.stop();
  return v;
}

// The run, once per process; under ctest once for all the cases below (the
// fixture "ddp_integration_ops:two real jobs", $DDP_OPS_TWO_JOBS).
const SavedRun& two_jobs(bool fresh = false) { return saved_run("DDP_OPS_TWO_JOBS", run_two_jobs, fresh); }

const std::string& view(const std::string& name) { return two_jobs().at(name); }

nlohmann::json json_view(const std::string& name) {
  return nlohmann::json::parse(view(name));  // json-parse-ok: a test reading its own tool's output
}

}  // namespace

TEST_CASE("two real jobs are recorded", "[.two-jobs]") {
  // ctest's fixture: runs them afresh and saves what each view showed.
  CHECK(two_jobs(true).count("all_gone") == 1);
}

TEST_CASE("ddp-store jobs --json gives a running job's backend, ranks, round and restarts", "[ops][jobs]") {
  const auto steady = json_view("steady.json");
  CHECK(steady["backend"] == "c10d");
  CHECK(steady["ranks"] == 4);
  CHECK(steady["round"] == 0);
  CHECK(steady["restarts"] == 0);
  CHECK(steady["max_restarts"] == 0);
  CHECK(steady["first_seen"].is_number());
}

TEST_CASE("ddp-store jobs --json gives a restarting job's restart budget and when it last failed",
          "[ops][jobs]") {
  const auto crashy = json_view("crashy.json");
  CHECK(crashy["max_restarts"] == 100000);
  CHECK(crashy["last_failure_time"].is_number());
}

TEST_CASE("ddp-store jobs prints a table with a row per job, the failing one's last failure", "[ops][jobs]") {
  CHECK(view("table.code") == "0");
  const auto& out = view("table.out");
  CHECK_THAT(out, Catch::StartsWith("RUN_ID  BACKEND  STATE"));
  CHECK(std::regex_search(out, std::regex(R"(\nsteady +c10d +running +2 +0 +0 +0 +4 +0 +0/0 )")));
  CHECK(std::regex_search(out, std::regex(R"(\ncrashy +c10d +\w+ .*rank [01] on [^ ]+: exit code 3)")));
}

TEST_CASE("ddp-store jobs --rdzv_id shows that job alone, and names a job that is not there", "[ops][jobs]") {
  CHECK(view("one.code") == "0");
  CHECK(view("one.out").find("crashy") == std::string::npos);
  CHECK(view("none.code") == "1");
  CHECK_THAT(view("none.err"), Catch::Contains("no ddprun job 'nope'"));
}

TEST_CASE("the per-job metrics give each job's round, nodes, ranks, state, restarts and last failure",
          "[ops][jobs]") {
  const auto& metrics = view("metrics");
  CHECK(sample(metrics, R"(ddp_rendezvous_round{run_id="steady"})") == 0);
  CHECK(sample(metrics, R"(ddp_rendezvous_nodes{run_id="steady"})") == 2);
  CHECK(sample(metrics, R"(ddp_rendezvous_ranks{run_id="steady"})") == 4);
  CHECK(sample(metrics, R"(ddp_rendezvous_job_state{run_id="steady",state="running",backend="c10d"})") == 1);
  CHECK(sample(metrics, R"(ddp_rendezvous_jobs{state="running"})") >= 1);
  CHECK(sample(metrics, R"(ddp_rendezvous_restarts{run_id="crashy"})") >= 2);
  CHECK(sample(metrics, R"(ddp_rendezvous_max_restarts{run_id="crashy"})") == 100000);
  CHECK(sample(metrics, R"(ddp_rendezvous_last_failure_timestamp_seconds{run_id="crashy"})") > 1.7e9);
  CHECK(sample(metrics, R"(ddp_rendezvous_last_failure_timestamp_seconds{run_id="steady"})") == -1);
}

TEST_CASE("the status page links both jobs and runs no script", "[ops][jobs]") {
  CHECK(view("page.status") == "200");
  CHECK_THAT(view("page.body"), Catch::Contains("<a href=\"/job?id=steady\">steady</a>"));
  CHECK_THAT(view("page.body"), Catch::Contains("<a href=\"/job?id=crashy\">crashy</a>"));
  CHECK_THAT(view("page.headers"), Catch::Contains("Content-Security-Policy: default-src 'none'"));
}

TEST_CASE("a failing job's page shows its error message, exit code and restarts", "[ops][jobs]") {
  CHECK(view("failing.status") == "200");
  CHECK_THAT(view("failing.body"), Catch::Contains("loss is nan at step 7"));
  CHECK_THAT(view("failing.body"), Catch::Contains("exit code 3"));
  CHECK_THAT(view("failing.body"), Catch::Contains("job restarted round="));
}

TEST_CASE("a running job's page shows its nodes and ranks", "[ops][jobs]") {
  CHECK_THAT(view("nodes.body"), Catch::Contains("Nodes (2)"));
  CHECK_THAT(view("nodes.body"), Catch::Contains("r3 running"));
}

TEST_CASE("a job page answers 404 for an unknown job and 400 for a malformed id, and /api/jobs is JSON",
          "[ops][jobs]") {
  CHECK(view("nope.status") == "404");
  CHECK(view("bad_id.status") == "400");
  CHECK(view("api.body").find("\"run_id\":\"steady\"") != std::string::npos);
}

TEST_CASE("the daemon log has a line when a job forms and when it restarts, and why", "[ops][jobs]") {
  const auto& log = view("log");
  CHECK_THAT(log, Catch::Contains("[store.jobs] [info] job formed run_id=steady round=0 nodes=2 ranks=4"));
  CHECK(std::regex_search(
      log, std::regex(R"(job restarted run_id=crashy round=1 nodes=1 ranks=2 )"
                      R"(why="restart_requested: node \S+ reported a failure: rank [01] on)")));
}

TEST_CASE("stopped jobs are logged with why, then reclaimed with their series, leaving no process",
          "[ops][jobs]") {
  CHECK(view("agents_ended") == "1");
  CHECK(view("reclaimed") == "1");
  CHECK(std::regex_search(
      view("log_after"), std::regex(R"(job stopped run_id=steady reason="agent on \S+ stopped by SIGTERM)")));
  CHECK(view("metrics_after").find("run_id=\"steady\"") == std::string::npos);
  CHECK(view("all_gone") == "1");
}
