// /metrics and /healthz scraped with raw HTTP while a client uses the store.
#include <signal.h>

#include <catch2/catch.hpp>
#include <regex>

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

TEST_CASE("metrics endpoint reports requests by op, keys, leases, rounds and latency", "[ops][metrics]") {
  TempDir dir;
  Process daemon(
      {bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
       (dir / "port").string(), "--metrics-port", "0", "--metrics-port-file", (dir / "mport").string()},
      dir.path(), {}, "rendezvousd");
  const int port = wait_for_port_file(dir / "port");
  const int mport = wait_for_port_file(dir / "mport");

  auto health = http_get(mport, "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");
  CHECK(http_get(mport, "/nope").status == 404);
  CHECK(http_get(mport, "/readyz").status == 200);

  auto before = http_get(mport, "/metrics");
  REQUIRE(before.status == 200);
  CHECK_THAT(before.body, Catch::Contains("# TYPE ddp_store_requests_total counter"));
  CHECK_THAT(before.body, Catch::Contains("# TYPE ddp_store_request_duration_seconds histogram"));
  CHECK(sample(before.body, "ddp_store_keys") == 0);
  CHECK(sample(before.body, "ddp_store_requests_total{op=\"set\"}") == 0);
  CHECK(sample(before.body, "ddp_store_connections") == 0);

  auto client = store_client(port);
  client->set("/job7/rdzv/round", "3");
  client->set("/job7/rdzv/round_3/seq", "1");
  client->set("/other/x", "y");
  client->add("/job8/rdzv/round", 1);
  const auto lease = client->lease_grant(60s);
  client->set("/job7/rdzv/round_3/node/0", "{}", lease);

  auto after = http_get(mport, "/metrics");
  REQUIRE(after.status == 200);
  INFO(after.body);
  CHECK(sample(after.body, "ddp_store_connections") == 1);
  CHECK(sample(after.body, "ddp_store_keys") == 5);
  CHECK(sample(after.body, "ddp_store_leases") == 1);
  CHECK(sample(after.body, "ddp_store_requests_total{op=\"set\"}") == 4);
  CHECK(sample(after.body, "ddp_store_requests_total{op=\"add\"}") == 1);
  CHECK(sample(after.body, "ddp_store_requests_total{op=\"lease_grant\"}") == 1);
  CHECK(sample(after.body, "ddp_store_history_bytes") > 0);
  CHECK(sample(after.body, "ddp_store_auth_failures_total") == 0);
  CHECK(sample(after.body, "ddp_store_unauthenticated_connections") == 0);
  CHECK(sample(after.body, "ddp_store_unauthenticated_closed_total") == 0);
  CHECK(sample(after.body, "ddp_rendezvous_round{run_id=\"job7\"}") == 3);
  CHECK(sample(after.body, "ddp_rendezvous_round{run_id=\"job8\"}") == 1);
  CHECK(sample(after.body, "ddp_rendezvous_round{run_id=\"other\"}") == -1);
  // hello + 4 set + add + lease_grant + set
  const auto count = sample(after.body, "ddp_store_request_duration_seconds_count");
  CHECK(count >= 7);
  CHECK(sample(after.body, "ddp_store_request_duration_seconds_bucket{le=\"+Inf\"}") == count);

  // Hot spares beside a job's current round, and its excluded hosts
  // (docs/rendezvous.md, "Hot spares" and "Bad nodes kept out").
  client->set("/job7/rdzv/round_3/spare/n9", "{}", lease);
  client->set("/job7/rdzv/round_2/spare/n8", "{}", lease);  // an old round's spare: not counted
  client->set("/job7/rdzv/excluded/h1", "2 worker failures");
  const auto spares = http_get(mport, "/metrics");
  INFO(spares.body);
  CHECK(sample(spares.body, "ddp_rendezvous_spares{run_id=\"job7\"}") == 1);
  CHECK(sample(spares.body, "ddp_rendezvous_excluded{run_id=\"job7\"}") == 1);
  CHECK(sample(spares.body, "ddp_rendezvous_spares{run_id=\"job8\"}") == -1);

  // A client sending garbage to the metrics port loses only its own connection.
  CHECK(http_get(mport, std::string(20000, 'x')).status != 200);
  CHECK(http_get(mport, "/healthz").status == 200);

  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
}
