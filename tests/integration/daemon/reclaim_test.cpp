// Key reclamation in the real ddp-rendezvousd with --data-dir: jobs of several
// rounds come and go through TcpStore clients (leased node records bound to
// their connections, as agents write them), and the daemon deletes old
// rounds as newer ones close and whole jobs once they are finished and idle.
// The short version of `ddp-bench soak` (docs/performance.md has the figures).
#include <catch2/catch.hpp>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "daemon_fixture.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/tcp_store.hpp"

using namespace ddp;
using namespace ddp::test;
using namespace std::chrono_literals;
namespace keys = ddp::store::keys;

namespace {

store::TcpStoreOptions options_for(int port) {
  store::TcpStoreOptions o;
  o.endpoint = Endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)};
  o.bind_leases_to_connection = true;
  return o;
}

std::int64_t stat_value(store::TcpStore& s, const std::string& name) { return std::stoll(s.stat().at(name)); }

// Rounds 0..rounds-1 of `run` written by one node; returns the most keys the
// job held after any round closed.
std::size_t run_job(int port, const std::string& run, int rounds) {
  store::TcpStore node(options_for(port));
  const auto lease = node.lease_grant(60s);
  std::size_t most = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto prefix = keys::round_prefix(run, r);
    node.add(prefix + "seq", 1);
    node.set(keys::node_key(prefix, 0), "{}", lease);
    node.set(keys::worker_prefix(run, r) + "rank_0", "127.0.0.1:1");
    node.set(keys::agent_status_key(run, "n0"), std::to_string(r));
    node.compare_set(prefix + "closed", "", "1 1 0");
    node.set(keys::round_pointer_key(run), std::to_string(r + 1));
    std::size_t held = 0;
    for (const auto& p : keys::job_prefixes(run)) held += node.list(p).kvs.size();
    most = std::max(most, held);
  }
  node.lease_revoke(lease);
  return most;
}

std::uintmax_t dir_size(const fs::path& dir) {
  std::uintmax_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

}  // namespace

TEST_CASE("old rounds go as newer ones close and finished jobs go once idle, on disk too") {
  TempDir tmp;
  const auto data = tmp.path() / "data";
  Daemon d(tmp.path(), {"--data-dir", data.string(), "--reclaim-idle-jobs-ms", "300"});
  store::TcpStore control(options_for(d.port));
  // Each round holds 4 keys (seq, node, worker, closed); with keep_rounds 2 a
  // job never holds more than 3 rounds' worth, plus its pointer and status.
  for (int job = 0; job < 20; ++job) {
    CHECK(run_job(d.port, "job" + std::to_string(job), 5) <= 3 * 4 + 2);
  }
  CHECK(wait_until([&] { return stat_value(control, "keys") == 0; }, 10s));
  CHECK(stat_value(control, "reclaimed_jobs") == 20);
  const auto after_first = dir_size(data);
  for (int job = 20; job < 40; ++job) run_job(d.port, "job" + std::to_string(job), 5);
  CHECK(wait_until([&] { return stat_value(control, "keys") == 0; }, 10s));
  // The log grows until compaction; the keys it describes do not.
  INFO("data dir after 20 jobs " << after_first << " bytes, after 40 " << dir_size(data));
  CHECK(stat_value(control, "reclaimed_jobs") == 40);
}

// The value of `metric` in the daemon's /metrics, or -1.
long long metric_of(int metrics_port, const std::string& metric) {
  const auto reply = http_get(metrics_port, "/metrics");
  std::istringstream lines(reply.body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(metric + " ", 0) == 0) return std::stoll(line.substr(metric.size() + 1));
  }
  return -1;
}

TEST_CASE("a finished job's watch history goes with its keys") {
  TempDir tmp;
  Daemon d(tmp.path(), {"--reclaim-idle-jobs-ms", "200", "--metrics-port", "0", "--metrics-port-file",
                        (tmp.path() / "mport").string()});
  const int mport = wait_for_port_file(tmp.path() / "mport");
  store::TcpStore control(options_for(d.port));
  for (int job = 0; job < 20; ++job) run_job(d.port, "job" + std::to_string(job), 5);
  REQUIRE(wait_until([&] { return stat_value(control, "keys") == 0; }, 10s));
  // Before: every finished job's puts and deletions stayed in the history
  // (about 4 KB of daemon memory per real ddprun job, until the history's caps).
  CHECK(metric_of(mport, "ddp_store_history_bytes") == 0);
  // A watch of a finished job from before it went answers COMPACTED; one of
  // another prefix from the start replays what it holds.
  control.set("/other/key", "v");
  CHECK_THROWS_WITH(control.watch(
                        "/job3/", 1, [](const store::WatchEvent&) {}, [](const std::string&) {}),
                    Catch::Contains("revision 1 is compacted"));
  std::vector<std::string> seen;
  std::mutex mu;
  auto w = control.watch(
      "/other/", 1,
      [&](const store::WatchEvent& e) {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(e.key);
      },
      [](const std::string&) {});
  CHECK(wait_until([&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen == std::vector<std::string>{"/other/key"};
  }));
}

TEST_CASE("a job whose agent still holds its lease is not reclaimed however idle") {
  TempDir tmp;
  Daemon d(tmp.path(), {"--reclaim-idle-jobs-ms", "200"});
  store::TcpStore node(options_for(d.port));
  const auto lease = node.lease_grant(60s);
  node.set(keys::node_key(keys::round_prefix("live", 0), 0), "{}", lease);
  node.set(keys::round_pointer_key("live"), "0");
  store::TcpStore control(options_for(d.port));
  // Several sweeps (every 100 ms at this setting) pass over it.
  CHECK_FALSE(wait_until([&] { return stat_value(control, "keys") != 2; }, 1s));
  node.lease_revoke(lease);
  CHECK(wait_until([&] { return stat_value(control, "keys") == 0; }, 5s));
}

TEST_CASE("a bad reclamation setting is one line naming it") {
  TempDir tmp;
  Process p({bin("ddp-rendezvousd").string(), "--port", "0", "--reclaim-idle-jobs-ms", "-5"}, tmp.path());
  CHECK(p.wait() == std::optional<int>(2));
  CHECK_THAT(p.err(), Catch::Matchers::Contains("reclaim_idle_jobs_ms") ||
                          Catch::Matchers::Contains("reclaim-idle-jobs-ms"));
}
