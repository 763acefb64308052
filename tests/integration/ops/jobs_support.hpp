// The steps the tests of a daemon's jobs share (jobs_test.cpp,
// jobs_two_jobs_test.cpp): a daemon with its log in a temp dir, its job
// listing as JSON, and one series of its metrics.
#pragma once

#include <signal.h>

#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test::jobs {

using namespace std::chrono_literals;

inline double sample(const std::string& body, const std::string& series) {
  const auto at = body.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(body.substr(at + series.size() + 2));
}

// A daemon on 127.0.0.1 with its log in `dir`/daemon.log.
struct Daemon {
  std::unique_ptr<Process> process;
  int port = 0;
  int mport = 0;
  std::string endpoint;
  Daemon(const TempDir& dir, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {bin("ddp-rendezvousd").string(),
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     "0",
                                     "--port-file",
                                     (dir / "port").string(),
                                     "--metrics-port",
                                     "0",
                                     "--metrics-port-file",
                                     (dir / "mport").string(),
                                     "--log-file",
                                     (dir / "daemon.log").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<Process>(argv, dir.path(), std::map<std::string, std::optional<std::string>>{},
                                        "rendezvousd");
    port = wait_for_port_file(dir / "port");
    mport = wait_for_port_file(dir / "mport");
    REQUIRE(port > 0);
    REQUIRE(mport > 0);
    endpoint = "127.0.0.1:" + std::to_string(port);
  }
  RunResult store(std::vector<std::string> args, const TempDir& dir) const {
    args.insert(args.begin(), {bin("ddp-store").string(), "--endpoint", endpoint});
    return run(args, dir.path());
  }
  void stop() {
    process->signal(SIGTERM);
    CHECK(process->wait(10s) == 0);
  }
};

inline nlohmann::json jobs_json(const Daemon& d, const TempDir& dir) {
  const auto r = d.store({"jobs", "--json"}, dir);
  if (r.code != 0) return nlohmann::json::array();
  return nlohmann::json::parse(r.out, nullptr, false);  // json-parse-ok: a test reading its own tool's output
}

inline const nlohmann::json* job(const nlohmann::json& jobs, const std::string& run_id) {
  if (!jobs.is_array()) return nullptr;
  for (const auto& j : jobs) {
    if (j.value("run_id", "") == run_id) return &j;
  }
  return nullptr;
}

}  // namespace ddp::test::jobs
