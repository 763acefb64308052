// The job's first failure named by its own time (docs/agent.md, "Failure
// report"): rank 0 fails first on a node that takes 6 s to stop its other
// worker, rank 2 fails two seconds later on a node that stops at once and
// so reports first. Every node must name rank 0's failure, the node of rank 2
// and the healthy node included.
#include <catch2/catch.hpp>

#include "elastic_support.hpp"

using namespace elastic;

namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("elastic " ELASTIC_NAME
          ": with failures on two nodes every node names the earliest, not the first reported") {
  TempDir dir;
  Service svc(dir);
  fs::create_directories(dir / "sync");
  AgentOptions o{svc.backend(), svc.endpoint(), "3:3", 2, Service::conf(), {}, 0};
  o.extra = {"--stop_timeout=6", "--python", "/usr/bin/python3"};
  o.worker = {(ddp::test::source_dir() / "tests" / "support" / "first_failure_worker.py").string(),
              (dir / "sync").string(), "0", "2"};
  Agent a(dir, "a", o);
  Agent b(dir, "b", o);
  Agent c(dir, "c", o);
  std::string errs;
  std::vector<std::string> err;
  for (auto* ag : {&a, &b, &c}) {
    CHECK(ag->proc->wait(90s) == std::optional<int>(1));
    err.push_back(ag->proc->err());
    errs += "--- " + ag->home.filename().string() + ":\n" + err.back();
  }
  INFO(errs);
  int named_by_report = 0, named_by_line = 0, named_as_healthy = 0;
  for (const auto& e : err) {
    if (e.find("rank       : 0 (local_rank 0)") != std::string::npos) {
      ++named_by_report;  // rank 0's node: its own report's root cause
    } else if (e.find("rank       : 0 (local_rank 0)") == std::string::npos &&
               e.find("Root cause (first failure)") != std::string::npos) {
      // rank 2's node: its report, then the job's first failure elsewhere.
      CHECK_THAT(e, Catch::Contains("ddprun: error: the job's first failure was on another node, at "));
      if (e.find("the job's first failure was on another node") != std::string::npos &&
          e.find(": rank 0 on ") != std::string::npos &&
          e.find("exit code 1 (first failure)") != std::string::npos)
        ++named_by_line;
    } else {
      CHECK(count(e, "ddprun: error:") == 1);
      const auto at = e.find("ddprun: error:");
      const auto line = at == std::string::npos ? "" : e.substr(at, e.find('\n', at) - at);
      CHECK_THAT(line, Catch::Contains("reported a failure: rank 0 on ") &&
                           Catch::Contains("exit code 1 (first failure); the job's first failure, at "));
      if (line.find("reported a failure: rank 0 on ") != std::string::npos) ++named_as_healthy;
    }
  }
  CHECK(named_by_report == 1);
  CHECK(named_by_line == 1);
  CHECK(named_as_healthy == 1);
}
