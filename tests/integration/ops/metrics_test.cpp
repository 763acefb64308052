// /metrics and /healthz scraped with raw HTTP while a client uses the store,
// and the per-job rendezvous gauges while real ddprun agents run jobs on it.
#include <signal.h>

#include <catch2/catch.hpp>
#include <regex>

#include "../launcher/launcher_test_util.hpp"
#include "ops_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

// The value of one sample line "<series> <value>", or -1 when absent.
double sample(const std::string& body, const std::string& series) {
  const auto at = body.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(body.substr(at + series.size() + 2));
}

}  // namespace

// A daemon with its store and metrics ports, and a client of its store.
struct MetricsDaemon {
  TempDir dir;
  Process daemon{
      {bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
       (dir / "port").string(), "--metrics-port", "0", "--metrics-port-file", (dir / "mport").string()},
      dir.path(),
      {},
      "rendezvousd"};
  int port = wait_for_port_file(dir / "port");
  int mport = wait_for_port_file(dir / "mport");

  std::string scrape() const {
    auto reply = http_get(mport, "/metrics");
    REQUIRE(reply.status == 200);
    return reply.body;
  }
  // job7 at round 3 and job8 at round 1, as their agents leave them.
  std::unique_ptr<ddp::store::TcpStore> two_jobs() const {
    auto client = store_client(port);
    client->set("/job7/rdzv/round", "3");
    client->add("/job8/rdzv/round", 1);
    return client;
  }
  // The metrics once two_jobs() and then `writes` are in the store (shown when a check fails).
  std::string scrape_after(std::initializer_list<std::pair<std::string, std::string>> writes) const {
    auto client = two_jobs();
    for (const auto& [key, value] : writes) client->set(key, value);
    auto body = scrape();
    UNSCOPED_INFO(body);
    return body;
  }
  ~MetricsDaemon() {
    daemon.signal(SIGTERM);
    CHECK(daemon.wait(10s) == 0);
  }
};

TEST_CASE("healthz and readyz answer ok and an unknown path is 404", "[ops][metrics]") {
  MetricsDaemon d;
  const auto health = http_get(d.mport, "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");
  CHECK(http_get(d.mport, "/readyz").status == 200);
  CHECK(http_get(d.mport, "/nope").status == 404);
}

TEST_CASE("a fresh daemon's metrics declare their types with zero counts", "[ops][metrics]") {
  MetricsDaemon d;
  const auto body = d.scrape();
  CHECK_THAT(body, Catch::Contains("# TYPE ddp_store_requests_total counter"));
  CHECK_THAT(body, Catch::Contains("# TYPE ddp_store_request_duration_seconds histogram"));
  CHECK(sample(body, "ddp_store_keys") == 0);
  CHECK(sample(body, "ddp_store_requests_total{op=\"set\"}") == 0);
  CHECK(sample(body, "ddp_store_connections") == 0);
}

TEST_CASE("store requests are counted by op beside the keys, leases and connections they leave",
          "[ops][metrics]") {
  MetricsDaemon d;
  auto client = store_client(d.port);
  client->set("/job7/rdzv/round", "3");
  client->set("/other/x", "y");
  client->add("/job8/rdzv/round", 1);
  const auto lease = client->lease_grant(60s);
  client->set("/job7/rdzv/round_3/node/0", "{}", lease);
  const auto body = d.scrape();
  INFO(body);
  CHECK(sample(body, "ddp_store_connections") == 1);
  CHECK(sample(body, "ddp_store_keys") == 4);
  CHECK(sample(body, "ddp_store_leases") == 1);
  CHECK(sample(body, "ddp_store_requests_total{op=\"set\"}") == 3);
  CHECK(sample(body, "ddp_store_requests_total{op=\"add\"}") == 1);
  CHECK(sample(body, "ddp_store_requests_total{op=\"lease_grant\"}") == 1);
  CHECK(sample(body, "ddp_store_history_bytes") > 0);
}

TEST_CASE("every request lands in the latency histogram", "[ops][metrics]") {
  MetricsDaemon d;
  auto client = store_client(d.port);
  for (int i = 0; i < 6; ++i) client->set("/job/x" + std::to_string(i), "v");
  const auto body = d.scrape();
  INFO(body);
  const auto count = sample(body, "ddp_store_request_duration_seconds_count");
  CHECK(count >= 7);  // hello + 6 set
  CHECK(sample(body, "ddp_store_request_duration_seconds_bucket{le=\"+Inf\"}") == count);
}

TEST_CASE("a daemon without a token counts no auth failures and no unauthenticated connections",
          "[ops][metrics]") {
  MetricsDaemon d;
  const auto body = d.scrape_after({{"/job/x", "v"}});
  for (const char* series : {"ddp_store_auth_failures_total", "ddp_store_unauthenticated_connections",
                             "ddp_store_unauthenticated_closed_total"}) {
    INFO(series);
    CHECK(sample(body, series) == 0);
  }
}

TEST_CASE("each job's round is a gauge read from its round key, and other prefixes are not jobs",
          "[ops][metrics]") {
  MetricsDaemon d;
  const auto body = d.scrape_after({{"/job7/rdzv/round_3/seq", "1"}, {"/other/x", "y"}});
  CHECK(sample(body, "ddp_rendezvous_round{run_id=\"job7\"}") == 3);
  CHECK(sample(body, "ddp_rendezvous_round{run_id=\"job8\"}") == 1);
  CHECK(sample(body, "ddp_rendezvous_round{run_id=\"other\"}") == -1);
}

// docs/rendezvous.md, "Hot spares" and "Bad nodes kept out".
TEST_CASE("a job's hot spares of its current round and its excluded hosts are counted", "[ops][metrics]") {
  MetricsDaemon d;
  auto client = d.two_jobs();
  const auto lease = client->lease_grant(60s);
  client->set("/job7/rdzv/round_3/spare/n9", "{}", lease);
  client->set("/job7/rdzv/round_2/spare/n8", "{}", lease);  // an old round's spare: not counted
  client->set("/job7/rdzv/excluded/h1", "2 worker failures");
  const auto body = d.scrape();
  INFO(body);
  CHECK(sample(body, "ddp_rendezvous_spares{run_id=\"job7\"}") == 1);
  CHECK(sample(body, "ddp_rendezvous_excluded{run_id=\"job7\"}") == 1);
  CHECK(sample(body, "ddp_rendezvous_spares{run_id=\"job8\"}") == -1);
}

// From the agents' status records and verdict (docs/agent-diagnosis.md).
TEST_CASE("only a status record whose state reads unhealthy counts as an unhealthy node", "[ops][metrics]") {
  MetricsDaemon d;
  const auto body = d.scrape_after({
      {"/job7/agent/status/n1", R"({"state":"unhealthy: GPU 3 fell off the bus","workers":[]})"},
      {"/job7/agent/status/n2", R"({"state":"running","note":"was unhealthy once"})"},
      {"/job7/agent/status/n3", "unhealthy, but not a record"},
  });
  CHECK(sample(body, "ddp_rendezvous_unhealthy_nodes{run_id=\"job7\"}") == 1);
  CHECK(sample(body, "ddp_rendezvous_unhealthy_nodes{run_id=\"job8\"}") == -1);
}

TEST_CASE("only a straggler verdict about the job's current round counts", "[ops][metrics]") {
  MetricsDaemon d;
  const auto body = d.scrape_after({
      {"/job7/agent/stragglers", R"({"round":3,"stragglers":[{"rank":5},{"rank":9}]})"},
      {"/job8/agent/stragglers", R"({"round":0,"stragglers":[{"rank":1}]})"},  // job8 is at round 1
      {"/other/agent/stragglers", "not json"},
  });
  CHECK(sample(body, "ddp_rendezvous_stragglers{run_id=\"job7\"}") == 2);
  CHECK(sample(body, "ddp_rendezvous_stragglers{run_id=\"job8\"}") == 0);
  CHECK(sample(body, "ddp_rendezvous_stragglers{run_id=\"other\"}") == -1);
}

TEST_CASE("a client sending garbage to the metrics port loses only its own connection", "[ops][metrics]") {
  MetricsDaemon d;
  CHECK(http_get(d.mport, std::string(20000, 'x')).status != 200);
  CHECK(http_get(d.mport, "/healthz").status == 200);
}

namespace {

// Python workers timing a "step" section with ddprun.liveness: 0.15 s a step,
// SLOW_RANK's 1.5 s, until STOP_FILE exists (the straggler test's set-up).
constexpr const char* kSteppingWorker = R"(import os, time
from ddprun import liveness
slow = int(os.environ["RANK"]) == int(os.environ["SLOW_RANK"])
deadline = time.monotonic() + 120
while time.monotonic() < deadline and not os.path.exists(os.environ["STOP_FILE"]):
    with liveness.section("step"):
        time.sleep(1.5 if slow else 0.15)
)";

}  // namespace

TEST_CASE("metrics count each job's unhealthy nodes, excluded hosts and stragglers until it is reclaimed",
          "[ops][metrics]") {
  TempDir dir;
  ProcessTag tag;
  // Finished jobs reclaimed 5 s after their last write: their series must go with them.
  Process daemon({bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
                  (dir / "port").string(), "--metrics-port", "0", "--metrics-port-file",
                  (dir / "mport").string(), "--reclaim-idle-jobs-ms", "5000", "--log-level", "warn"},
                 dir.path(), {}, "rendezvousd");
  const int port = wait_for_port_file(dir / "port");
  const int mport = wait_for_port_file(dir / "mport");
  REQUIRE(port > 0);
  REQUIRE(mport > 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  write_file(dir / "worker.py", kSteppingWorker);

  // One ddprun agent of job `run_id` on the daemon.
  const auto agent = [&](const std::string& run_id, const std::string& name, std::vector<std::string> flags,
                         std::vector<std::string> program, launcher::EnvOverrides env = {}) {
    std::vector<std::string> args = {"--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
                                     "--rdzv_id=" + run_id, "--log_level=warn",
                                     "--rdzv_conf=join_timeout=60"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), program.begin(), program.end());
    env.insert(tag.env());
    return std::make_unique<Process>(launcher::ddprun_argv(args), dir.path(), launcher::clean_env(env), name);
  };
  const std::vector<std::string> fake = {"--no_python", bin("fake_worker").string()};
  std::string body;
  // Waits until `series` reads `want` (-1: absent) in a scrape; the last scrape is in `body`.
  const auto reads = [&](const std::string& series, double want) {
    return wait_until(
        [&] {
          body = http_get(mport, "/metrics").body;
          return sample(body, series) == want;
        },
        60s);
  };

  // A node failing its --health_check beside a healthy one that waits for it.
  auto good = agent("healthjob", "good", {"--nnodes=2"}, fake);
  auto bad = agent("healthjob", "bad",
                   {"--nnodes=2", "--health_check", "echo GPU 3 fell off the bus >&2; false",
                    "--health_retries=1000", "--health_retry_interval=0.2"},
                   fake);
  // A lone node whose worker fails: excluded at its first failure (counted
  // where a restart would follow), exit 6.
  auto excluded = agent("exjob", "excluded", {"--nnodes=1:1", "--max_restarts=1", "--max_node_failures=1"},
                        fake, {{"FAKE_EXIT", "1"}});
  // Four ranks of one node, rank 2 ten times slower than the others.
  auto slow = agent("strag", "strag",
                    {"--nnodes=1", "--nproc_per_node=4", "--straggler_factor=3", "--straggler_steps=3"},
                    {"--no_python", "python3", (dir / "worker.py").string()},
                    {{"PYTHONPATH", (source_dir() / "python").string()},
                     {"SLOW_RANK", "2"},
                     {"STOP_FILE", (dir / "stop").string()}});
  const auto logs = [&] {
    return "good:\n" + good->err() + "\nbad:\n" + bad->err() + "\nexcluded:\n" + excluded->err() +
           "\nstrag:\n" + slow->err();
  };

  const auto expect = [&](const std::string& series, double want) {
    if (!reads(series, want)) FAIL_CHECK(series << " never read " << want << "\n" << body << logs());
  };
  expect("ddp_rendezvous_excluded{run_id=\"exjob\"}", 1);
  expect("ddp_rendezvous_unhealthy_nodes{run_id=\"healthjob\"}", 1);
  expect("ddp_rendezvous_stragglers{run_id=\"strag\"}", 1);
  INFO(body << logs());
  CHECK(excluded->wait(30s) == 6);
  CHECK(sample(body, "ddp_rendezvous_unhealthy_nodes{run_id=\"strag\"}") == 0);
  CHECK(sample(body, "ddp_rendezvous_stragglers{run_id=\"healthjob\"}") == -1);
  CHECK(sample(body, "ddp_rendezvous_excluded{run_id=\"strag\"}") == -1);
  for (const char* name : {"ddp_rendezvous_unhealthy_nodes", "ddp_rendezvous_stragglers"}) {
    CHECK_THAT(body, Catch::Contains(std::string("# TYPE ") + name + " gauge\n") &&
                         Catch::Contains(std::string("# HELP ") + name + " "));
  }
  // The healthy node still waits for the other: the job has not started.
  CHECK_FALSE(good->wait(0ms).has_value());

  // Every job ends; once the daemon reclaims their keys, their series are gone.
  write_file(dir / "stop", "");
  CHECK(slow->wait(30s) == 0);
  good->signal(SIGTERM);
  bad->signal(SIGTERM);
  CHECK(good->wait(30s).has_value());
  CHECK(bad->wait(30s).has_value());
  const bool reclaimed = wait_until(
      [&] {
        body = http_get(mport, "/metrics").body;
        return body.find("run_id=\"healthjob\"") == std::string::npos &&
               body.find("run_id=\"exjob\"") == std::string::npos &&
               body.find("run_id=\"strag\"") == std::string::npos;
      },
      30s);
  if (!reclaimed) FAIL_CHECK("series still shown after the jobs ended:\n" << body << logs());
  CHECK(tag.all_gone(10s));
  INFO(tag.describe());
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
}
