// Who hung, with torch workers (docs/agent-diagnosis.md, "Who hung: the culprit rule"):
// hang_culprit.py, the docs' step (`with liveness.section("step"): compute();
// dist.all_reduce(t)`) on three gloo ranks, one of them hanging in compute()
// at step 5 after a slow batch, so that the ranks waiting for it in the
// all-reduce miss their deadlines first. One ddprun run of ten attempts
// (--max_restarts=9), the hanging rank the lowest, the middle and the
// highest in turn; each attempt's failure.json must name it. With torch 2.x
// (label torch2) the Flight Recorder's counts decide, with Debian's torch 1.13
// (label torch, [core] cases only) the stacks.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "torch_support.hpp"

using namespace ddp::test;
using namespace ddp::test::torch;
using namespace std::chrono_literals;

namespace {

const std::vector<int> kOrder = {0, 1, 2, 0, 1, 2, 0, 1, 2, 1};

std::string order_arg() {
  std::string out;
  for (int r : kOrder) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

struct Attempts {
  RunResult run;
  int right = 0;
  std::string wrong;
};

// ddprun over three local ranks with `flags`, ten attempts of `mode`.
Attempts ten_attempts(const std::string& mode, std::vector<std::string> flags) {
  TempDir dir;
  Attempts a;
  std::vector<std::string> args = {"--standalone", "--nproc_per_node=3", "--max_restarts=9", "--log_dir",
                                   (dir / "logs").string()};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {script("hang_culprit.py"), mode, order_arg()});
  a.run = run(ddprun(args), dir.path(), worker_env(), 560s);
  fs::path run_dir = dir / "logs";  // <log_dir>/<run_id>/: the one run
  for (const auto& e : fs::directory_iterator(dir / "logs")) run_dir = e.path();
  for (std::size_t k = 0; k < kOrder.size(); ++k) {
    const auto file = run_dir / ("attempt_" + std::to_string(k)) / "failure.json";
    const auto h = std::to_string(kOrder[k]);
    std::string why = "no " + file.string();
    if (fs::exists(file)) {
      const auto root = nlohmann::json::parse(read_file(file))["root_cause"];
      // "ranks 0, 2 wait in all_reduce #5 for rank 1", or one clause per rank
      // ("rank 0 waits in all_reduce for rank 1; rank 2 waits ...") when a
      // rank's place came from its stack, its Flight Recorder dump late.
      const std::string waiting = root.contains("hang") ? root["hang"]["waiting"].get<std::string>() : "";
      const bool ok = root["rank"] == kOrder[k] && waiting.find(" in all_reduce") != std::string::npos &&
                      waiting.find("for rank " + h) != std::string::npos;
      if (ok) {
        ++a.right;
        continue;
      }
      why = root.dump(2);
    }
    a.wrong += "attempt " + std::to_string(k) + " (rank " + h + " hung): " + why + "\n";
  }
  return a;
}

}  // namespace

TEST_CASE(
    "torch: with section timeouts the rank hung in compute is named, not the ranks in all_reduce, 10 of 10",
    "[core]") {
  if (!have_torch()) return;
  const auto a = ten_attempts("section", {"--section_timeouts", "step=2"});
  INFO(a.wrong << a.run.err);
  CHECK(a.run.code == 1);
  CHECK(a.right == 10);
}

TEST_CASE(
    "torch: with a heartbeat timeout the rank hung in compute is named, not the ranks in all_reduce, 10 of "
    "10") {
  if (!have_torch()) return;
  const auto a = ten_attempts("heartbeat", {"--heartbeat_timeout", "2"});
  INFO(a.wrong << a.run.err);
  CHECK(a.run.code == 1);
  CHECK(a.right == 10);
}

TEST_CASE("torch: a rank that heartbeats from a thread while it hangs is named, and the report says so") {
  if (!have_torch()) return;
  TempDir dir;
  const auto r = run(ddprun({"--standalone", "--nproc_per_node=3", "--heartbeat_timeout", "2",
                             "--section_timeouts", "step=2", script("hang_culprit.py"), "thread", "1"}),
                     dir.path(), worker_env(), 180s);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank       : 1 (local_rank 1)"));
  CHECK_THAT(r.err, Catch::Contains("  liveness   : it still heartbeats (the latest "));
  CHECK_THAT(r.err, Catch::Contains("its heartbeats come from a thread other than the stuck one"));
}

TEST_CASE("torch: a worker that heartbeats only once is told so in the report") {
  if (!have_torch()) return;
  TempDir dir;
  const auto r = run(ddprun({"--standalone", "--nproc_per_node=3", "--heartbeat_timeout", "2",
                             script("hang_culprit.py"), "once", "2"}),
                     dir.path(), worker_env(), 180s);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("  hang       : heartbeat missed"));
  CHECK_THAT(r.err,
             Catch::Contains("  liveness   : it heartbeat once (") &&
                 Catch::Contains("and never again: --heartbeat_timeout counts from the first heartbeat"));
}
