// What an operator sees of the jobs on a daemon: `ddp-store jobs`, the status
// page (raw HTTP here; tests/integration/ops/status_page_browser_test.sh loads
// it in a real browser), the per-job metrics and the daemon's log of each
// job's life, with hostile keys, a token and a big job; two real ddprun jobs
// seen from each of those views: jobs_two_jobs_test.cpp.
#include <signal.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <regex>

#include "../launcher/launcher_test_util.hpp"
#include "jobs_support.hpp"
#include "ops_support.hpp"

using namespace ddp::test;
using namespace ddp::test::jobs;
using namespace std::chrono_literals;

TEST_CASE(
    "hostile run ids, host names and failure texts are shown as text in the CLI, the page, the log and "
    "the metrics",
    "[ops][jobs]") {
  TempDir dir;
  Daemon d(dir);
  auto client = store_client(d.port);
  const std::string run = "<img src=x onerror=alert(1)>\x1b]0;pwned\x07";
  const std::string root = "/" + run;
  client->set(root + "/rdzv/round_0/closed", "1 2 3");
  client->set(root + "/agent/status/n1",
              R"({"node":"n1","host":"<script>alert(2)</script>\u001b[2J","state":"running","round":0,)"
              R"("group_rank":0,"group_world_size":1,"rank_first":0,"rank_last":1,"workers":[]})");
  client->set(root + "/agent/failure/n1",
              "{\"summary\":\"</pre><script>alert(3)</script>\\u001b[31mred\",\"time\":1.8e9,"
              "\"hang\":{\"what\":\"x\",\"frames\":[\"<b onmouseover=alert(4)>frame</b>\"]}}");

  const auto list = http_get(d.mport, "/");
  REQUIRE(list.status == 200);
  CHECK(list.body.find("<img") == std::string::npos);
  CHECK(list.body.find('\x1b') == std::string::npos);
  CHECK_THAT(list.body, Catch::Contains("&lt;img src=x onerror=alert(1)&gt;\\x1b]0;pwned\\x07"));
  CHECK_THAT(list.body,
             Catch::Contains("/job?id=%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%1B%5D0%3Bpwned%07"));
  const auto page =
      http_get(d.mport, "/job?id=%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%1B%5D0%3Bpwned%07");
  REQUIRE(page.status == 200);
  CHECK(page.body.find("<script") == std::string::npos);
  CHECK(page.body.find("<b ") == std::string::npos);
  CHECK(page.body.find('\x1b') == std::string::npos);
  CHECK_THAT(page.body, Catch::Contains("&lt;script&gt;alert(2)&lt;/script&gt;\\x1b[2J"));
  CHECK_THAT(page.body, Catch::Contains("&lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt;\\x1b[31mred"));
  CHECK_THAT(page.body, Catch::Contains("&lt;b onmouseover=alert(4)&gt;frame&lt;/b&gt;"));

  const auto table = d.store({"jobs"}, dir);
  CHECK(table.code == 0);
  CHECK(table.out.find('\x1b') == std::string::npos);
  CHECK(table.out.find('\x07') == std::string::npos);
  CHECK_THAT(table.out, Catch::Contains("<img src=x onerror=alert(1)>\\x1b]0;pwned\\x07"));
  CHECK_THAT(table.out, Catch::Contains("</pre><script>alert(3)</script>\\x1b[31mred"));
  const auto json = d.store({"jobs", "--json"}, dir);
  CHECK(json.out.find('\x1b') == std::string::npos);
  CHECK_THAT(json.out, Catch::Contains(R"("run_id": "<img src=x onerror=alert(1)>\u001b]0;pwned\u0007")"));

  const auto metrics = http_get(d.mport, "/metrics").body;
  CHECK(metrics.find('\x1b') == std::string::npos);
  CHECK_THAT(
      metrics,
      Catch::Contains(R"(ddp_rendezvous_round{run_id="<img src=x onerror=alert(1)>\\x1b]0;pwned\\x07"} 0)"));

  const bool logged =
      wait_until([&] { return read_file(dir / "daemon.log").find("job formed") != std::string::npos; }, 10s);
  CHECK(logged);
  const auto log = read_file(dir / "daemon.log");
  CHECK(log.find('\x1b') == std::string::npos);
  CHECK_THAT(log,
             Catch::Contains(R"(job formed run_id=<img src=x onerror=alert(1)>\x1b]0;pwned\x07 round=0)"));
  d.stop();
}

TEST_CASE("with a token the page answers 401 and shows nothing of the store until the token comes",
          "[ops][jobs]") {
  TempDir dir;
  write_file(dir / "token", "s3cret-token-0123456789\n");
  Daemon d(dir, {"--token-file", (dir / "token").string()});
  ddp::store::TcpStoreOptions o;
  o.endpoint = {"127.0.0.1", static_cast<std::uint16_t>(d.port)};
  o.token = "s3cret-token-0123456789";
  ddp::store::TcpStore client(o);
  client.set("/secretjob/rdzv/round_0/closed", "1 1 1");
  client.set("/secretjob/rdzv/closed", "the secret reason");

  for (const char* path : {"/", "/job?id=secretjob", "/api/jobs"}) {
    for (const std::string& auth : {std::string(), std::string("Authorization: Bearer wrong\r\n"),
                                    std::string("Authorization: Basic b3BzOndyb25n\r\n"),
                                    std::string("Authorization: Bearer s3cret-token-012345678\r\n")}) {
      const auto r = http_get(d.mport, path, 10s, auth);
      INFO(path << " " << auth);
      CHECK(r.status == 401);
      CHECK_THAT(r.headers, Catch::Contains("WWW-Authenticate: Basic realm=\"ddp-rendezvousd\""));
      CHECK(r.body.find("secret") == std::string::npos);
    }
  }
  const auto bearer = http_get(d.mport, "/", 10s, "Authorization: Bearer s3cret-token-0123456789\r\n");
  CHECK(bearer.status == 200);
  CHECK_THAT(bearer.body, Catch::Contains("secretjob"));
  // What a browser sends once the person typed the token as the password.
  const auto basic = http_get(d.mport, "/job?id=secretjob", 10s,
                              "Authorization: Basic b3BzOnMzY3JldC10b2tlbi0wMTIzNDU2Nzg5\r\n");
  CHECK(basic.status == 200);
  CHECK_THAT(basic.body, Catch::Contains("the secret reason"));
  // The probes and Prometheus need no token.
  CHECK(http_get(d.mport, "/healthz").status == 200);
  CHECK(http_get(d.mport, "/metrics").status == 200);
  d.stop();
}

TEST_CASE("SIGHUP reopens --log-file, so that logrotate can move it away", "[ops][jobs]") {
  TempDir dir;
  Daemon d(dir);
  REQUIRE(
      wait_until([&] { return read_file(dir / "daemon.log").find("listening") != std::string::npos; }, 10s));
  std::filesystem::rename(dir / "daemon.log", dir / "daemon.log.1");
  d.process->signal(SIGHUP);
  REQUIRE(wait_until(
      [&] { return read_file(dir / "daemon.log").find("log file reopened") != std::string::npos; }, 10s));
  auto client = store_client(d.port);
  client->set("/rotated/rdzv/round_0/closed", "1 1 1");
  CHECK(wait_until(
      [&] { return read_file(dir / "daemon.log").find("job formed run_id=rotated") != std::string::npos; },
      10s));
  CHECK(read_file(dir / "daemon.log.1").find("job formed") == std::string::npos);
  CHECK(d.process->running());
  d.stop();
}

TEST_CASE("a 10,000-node job is listed whole and its page shows 100 nodes at a time", "[ops][jobs]") {
  TempDir dir;
  Daemon d(dir);
  auto client = store_client(d.port);
  constexpr int kNodes = 10000;
  std::vector<std::pair<std::string, std::string>> kvs;
  for (int g = 0; g < kNodes; ++g) {
    const auto n = std::to_string(g);
    std::string workers;
    for (int l = 0; l < 8; ++l) {
      workers += std::string(l ? "," : "") + R"({"local_rank":)" + std::to_string(l) + R"(,"rank":)" +
                 std::to_string(g * 8 + l) +
                 R"(,"pid":1000,"state":"running","heartbeat_age_s":0.4,"step_s":0.25})";
    }
    kvs.emplace_back("/big/agent/status/node" + n,
                     R"({"node":"node)" + n + R"(","host":"host)" + n + R"(","state":"running","round":0,)" +
                         R"("group_rank":)" + n + R"(,"group_world_size":10000,"rank_first":)" +
                         std::to_string(g * 8) + R"(,"rank_last":)" + std::to_string(g * 8 + 7) +
                         R"(,"restart_count":0,"max_restarts":3,"workers":[)" + workers + "]}");
  }
  client->multi_set(kvs);
  client->set("/big/rdzv/round_0/closed", "10000 80000 7");

  const auto started = std::chrono::steady_clock::now();
  const auto table = d.store({"jobs"}, dir);
  const auto listed = std::chrono::steady_clock::now();
  const auto first = http_get(d.mport, "/job?id=big");
  const auto rendered = std::chrono::steady_clock::now();
  const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  // Figures, not assertions (docs/performance.md has the benchmark's).
  WARN("10,000-node job: ddp-store jobs " << ms(started, listed) << " ms, its first page "
                                          << ms(listed, rendered) << " ms");
  CHECK(table.code == 0);
  CHECK(std::regex_search(table.out, std::regex(R"(\nbig +c10d +\w+ +0 +0 +0 +0 +80000 +0 +0/3 )")));
  REQUIRE(first.status == 200);
  CHECK_THAT(first.body, Catch::Contains("Nodes (10000)"));
  const auto rows = [](const std::string& body) {
    std::size_t n = 0;
    for (auto at = body.find("<tr class=\"node\">"); at != std::string::npos;
         at = body.find("<tr class=\"node\">", at + 1))
      ++n;
    return n;
  };
  CHECK(rows(first.body) == 100);
  CHECK_THAT(first.body, Catch::Contains("host99<"));
  CHECK(first.body.find("host100<") == std::string::npos);
  const auto last = http_get(d.mport, "/job?id=big&page=100");
  CHECK(rows(last.body) == 100);
  CHECK_THAT(last.body, Catch::Contains("host9999<"));
  CHECK_THAT(last.body, Catch::Contains("r79999 running"));
  CHECK(http_get(d.mport, "/job?id=big&page=0").status == 400);
  d.stop();
}

TEST_CASE("the jobs page lists 200 jobs a page and filters them by state", "[ops][jobs]") {
  TempDir dir;
  Daemon d(dir);
  auto client = store_client(d.port);
  std::vector<std::pair<std::string, std::string>> kvs;
  for (int i = 0; i < 250; ++i) {
    char run[16];
    std::snprintf(run, sizeof run, "job%03d", i);
    kvs.emplace_back(std::string("/") + run + "/rdzv/round_0/closed", "1 1 1");
    if (i % 25 == 0) kvs.emplace_back(std::string("/") + run + "/rdzv/closed", "workers failed");
  }
  client->multi_set(kvs);
  const auto rows = [](const std::string& body) {
    std::size_t n = 0;
    for (auto at = body.find("<tr class=\"job\">"); at != std::string::npos;
         at = body.find("<tr class=\"job\">", at + 1)) {
      ++n;
    }
    return n;
  };
  const auto first = http_get(d.mport, "/");
  REQUIRE(first.status == 200);
  CHECK(rows(first.body) == 200);
  CHECK_THAT(first.body, Catch::Contains("<b>all 250</b>"));
  CHECK_THAT(first.body, Catch::Contains("<a href=\"/?state=failed\">failed 10</a>"));
  CHECK_THAT(first.body, Catch::Contains("<a href=\"/?page=2\">2</a>"));
  CHECK_THAT(first.body, Catch::Contains(">job199<"));
  const auto second = http_get(d.mport, "/?page=2");
  CHECK(rows(second.body) == 50);
  CHECK_THAT(second.body, Catch::Contains(">job249<"));
  const auto failed = http_get(d.mport, "/?state=failed");
  CHECK(rows(failed.body) == 10);
  CHECK_THAT(failed.body, Catch::Contains(">job225<"));
  CHECK(failed.body.find(">job001<") == std::string::npos);
  CHECK(http_get(d.mport, "/?state=bogus").status == 400);
  CHECK(http_get(d.mport, "/?page=x").status == 400);
  d.stop();
}
