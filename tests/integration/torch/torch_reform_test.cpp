// In-process re-form for torch (label torchreform): python/examples/reform_ddp.py,
// the torch DDP trainer on ddprun.elastic, under a real ddprun
// --on_failure=reform with 4 Gloo ranks. A SIGKILLed rank is replaced while the
// others keep their processes and end at the loss of a run without the kill;
// torch 1.13, and a script that catches MembershipChanged but never re-forms,
// fall back to restart with one line each (docs/reform.md, "Python trainers").
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>

#include "test_support.hpp"
#include "torch_support.hpp"

using namespace ddp::test;
using namespace ddp::test::torch;
using namespace std::chrono_literals;

namespace {

// The final losses of a kill and a no-kill run may differ in the last digits:
// after a re-form DDP is wrapped anew, and its first step reduces the
// gradients in its initial bucket layout, where the run without a kill had
// already rebuilt its buckets (docs/reform.md, "Python trainers").
constexpr double kLossTolerance = 1e-6;

struct Run {
  RunResult r;
  std::string all;  // stdout and stderr
};

// ddprun over 4 local ranks running the example with `args`; its output.
Run reform_run(std::vector<std::string> args, Env extra = {}) {
  TempDir dir;
  std::vector<std::string> argv = {"--standalone", "--nproc_per_node=4", "--on_failure=reform",
                                   "--max_restarts=3",
                                   (source_dir() / "python/examples/reform_ddp.py").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  extra["PYTHONPATH"] = (source_dir() / "python").string();
  Run run_out;
  run_out.r = run(ddprun(argv), dir.path(), worker_env(extra), 200s);
  run_out.all = run_out.r.out + run_out.r.err;
  return run_out;
}

double final_loss(const std::string& out) {
  std::smatch m;
  static const std::regex re("final loss ([0-9.]+)");
  return std::regex_search(out, m, re) ? std::stod(m[1].str()) : -1.0;
}

// rank -> pids of its "started" lines, in order.
std::map<int, std::vector<std::string>> started(const std::string& out) {
  std::map<int, std::vector<std::string>> pids;
  static const std::regex re("rank ([0-9]+) pid ([0-9]+): started");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    pids[std::stoi((*it)[1].str())].push_back((*it)[2].str());
  return pids;
}

}  // namespace

TEST_CASE("torch re-form: a SIGKILLed rank is replaced, the others keep their pids and the loss", "[kill]") {
  if (!have_torch()) return;
  const auto base = reform_run({});
  INFO("no kill:\n" << base.all);
  REQUIRE(base.r.code == 0);
  const auto kill = reform_run({"--kill-rank", "2", "--kill-step", "40"});
  INFO("kill:\n" << kill.all);
  REQUIRE(kill.r.code == 0);
  CHECK_THAT(kill.all, Catch::Contains("reform: rank 2 lost (signal SIGKILL); starting a replacement (1/3)"));
  CHECK_THAT(kill.all, !Catch::Contains("falling back"));
  const auto pids = started(kill.all);
  REQUIRE(pids.size() == 4);
  for (int rank : {0, 1, 3}) {
    // One process for the whole run, the one that reports the re-form.
    REQUIRE(pids.at(rank).size() == 1);
    CHECK_THAT(kill.all, Catch::Contains("rank " + std::to_string(rank) + " pid " + pids.at(rank)[0] +
                                         " (survivor): kill to next completed step"));
  }
  REQUIRE(pids.at(2).size() == 2);
  CHECK_THAT(kill.all, Catch::Contains("rank 2 pid " + pids.at(2)[1] + " (replacement)"));
  CHECK_THAT(kill.all, Catch::Contains("steps lost 0"));
  const double a = final_loss(base.all), b = final_loss(kill.all);
  CHECK(a > 0);
  CHECK(std::fabs(a - b) <= kLossTolerance);
}

TEST_CASE("torch re-form: a survivor stopped instead of re-forming is named, killed and replaced",
          "[stall]") {
  if (!have_torch()) return;
  // Rank 2 dies; rank 1 stops where it would re-form. The others name the
  // generation stalled after 3 s, and rank 1's agent replaces it.
  const auto run_out = reform_run({"--kill-rank", "2", "--kill-step", "40", "--stop-rank", "1"},
                                  {{"DDP_REFORM_STALL_TIMEOUT", "3"}});
  INFO(run_out.all);
  REQUIRE(run_out.r.code == 0);
  CHECK_THAT(run_out.all, Catch::Contains("rank 1 pid") && Catch::Contains("SIGSTOP instead of re-forming"));
  CHECK_THAT(run_out.all,
             Catch::Contains("reform: generation 1 waited 3 s (DDP_REFORM_STALL_TIMEOUT); slot(s) 1 "
                             "never joined"));
  CHECK_THAT(run_out.all, Catch::Contains("reform: rank 1 lost (hung, reform not joined (generation 1"));
  // Ranks 1 and 2 each started twice; 0 and 3 kept their one process.
  const auto pids = started(run_out.all);
  REQUIRE(pids.size() == 4);
  CHECK(pids.at(0).size() == 1);
  CHECK(pids.at(3).size() == 1);
  CHECK(pids.at(1).size() == 2);
  CHECK(pids.at(2).size() == 2);
  CHECK(final_loss(run_out.all) > 0);
}

TEST_CASE("torch re-form: torch 1.13 says so in one line and the job falls back to restart", "[torch1]") {
  // Debian's torch 1.13, whatever python the label chose for the others.
  ::unsetenv("DDP_TEST_PYTHON");
  if (!have_torch()) return;
  const auto kill = reform_run({"--kill-rank", "1", "--kill-step", "20", "--steps", "40"});
  INFO(kill.all);
  CHECK(kill.r.code == 0);
  CHECK_THAT(kill.all, Catch::Contains("ddprun.elastic: torch 1.13"));
  CHECK_THAT(kill.all,
             Catch::Contains("not re-forming in process; ddprun falls back to --on_failure=restart"));
  CHECK_THAT(kill.all, Catch::Contains("falling back to --on_failure=restart for this run"));
  CHECK(final_loss(kill.all) > 0);
}

TEST_CASE("torch re-form: a script that catches MembershipChanged but never re-forms falls back to restart",
          "[catch]") {
  if (!have_torch()) return;
  const auto kill = reform_run({"--kill-rank", "1", "--kill-step", "20", "--steps", "40", "--catch-only"},
                               {{"DDP_REFORM_ABANDON", "2"}});
  INFO(kill.all);
  CHECK(kill.r.code == 0);
  CHECK_THAT(kill.all,
             Catch::Contains("this script never called ElasticGroup.reform(): exiting so that ddprun "
                             "falls back to --on_failure=restart"));
  CHECK_THAT(kill.all,
             Catch::Contains("did not catch ddp::MembershipChanged: falling back to --on_failure=restart"));
  CHECK(final_loss(kill.all) > 0);
}
