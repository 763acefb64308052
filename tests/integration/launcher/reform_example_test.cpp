// --on_failure=reform end to end (docs/reform.md): the real ddprun running
// ddp-example-train-reform, whose slot 3 SIGKILLs itself every few steps.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

// 2 epochs of 2048 samples at 32 per rank and step: 16 steps per epoch on 4 ranks.
std::vector<std::string> four_ranks(std::vector<std::string> flags, const TempDir& dir,
                                    std::vector<std::string> trainer_args) {
  std::vector<std::string> args = {"--standalone", "--nproc_per_node=4"};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const std::string& a : {std::string("--no_python"), bin("ddp-example-train-reform").string(),
                               std::string("--epochs"), std::string("2"), std::string("--dataset-size"),
                               std::string("2048"), std::string("--checkpoint"), (dir / "ckpt").string()}) {
    args.push_back(a);
  }
  args.insert(args.end(), trainer_args.begin(), trainer_args.end());
  return args;
}

double final_loss(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(final loss ([0-9.]+) after)"))) {
    FAIL("no final loss line");
  }
  return std::stod(m[1]);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

void check_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) CHECK_THAT(text, Catch::Contains(part));
}

// The final loss of the same job without a failure.
double failure_free_loss() {
  TempDir dir;
  const RunResult clean = ddprun(four_ranks({}, dir, {}), dir);
  INFO(clean.out << clean.err);
  REQUIRE(clean.code == 0);
  CHECK_THAT(clean.out, Catch::Contains("0 re-forms, 0 restarts"));
  return final_loss(clean.out);
}

// Two SIGKILLs, 10 steps apart, under --on_failure=reform; the run must succeed.
RunResult two_kills(const TempDir& dir, std::vector<std::string> trainer_args) {
  for (const char* a : {"--kill-every", "10", "--kills", "2"}) trainer_args.emplace_back(a);
  RunResult r = ddprun(four_ranks({"--on_failure=reform", "--max_restarts=3"}, dir, trainer_args), dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return r;
}

}  // namespace

TEST_CASE("reform: two SIGKILLed workers are replaced in place and the final loss is the failure-free one") {
  const double clean_loss = failure_free_loss();
  TempDir dir;
  const RunResult r = two_kills(dir, {});
  INFO(r.out << r.err);
  CHECK(count(r.out, "SIGKILL after step") == 2);
  CHECK(count(r.out, "re-form: generation ") == 2);
  check_contains(r.out, {"re-form: generation 1, world 4 (lost slots -, new slots 3)",
                         "re-form: generation 2, world 4 (lost slots -, new slots 3)", "steps lost 0",
                         "after 2 epochs, 32 steps, 2 re-forms, 0 restarts"});
  // The same world size throughout, so every step saw the same samples: the
  // same parameters, up to nothing (the state is copied bit for bit).
  CHECK(relative(final_loss(r.out), clean_loss) <= 1e-6);
  // Survivors kept their processes; slot 3 is a third process.
  const auto start = trainer_slot_pids(r.out, "start"), end = trainer_slot_pids(r.out, "end");
  REQUIRE(end.size() == 4);
  for (int slot : {0, 1, 2}) CHECK(end.at(slot) == start.at(slot));
  CHECK(count(r.out, "slot 3 pid ") == 3 + 2 + 1);  // three starts, two kills, one end
}

TEST_CASE("reform: killing rank 0, the state root and reporter, then rank 1 still matches the loss") {
  const double clean_loss = failure_free_loss();
  TempDir dir;
  const RunResult r = two_kills(dir, {"--kill-rotate"});
  INFO(r.out << r.err);
  CHECK_THAT(r.out, Catch::Contains("slot 0 pid ") && Catch::Contains(": SIGKILL after step 10"));
  // The replacement of slot 0 is the new rank 0: it reports both re-forms.
  check_contains(
      r.out,
      {": SIGKILL after step 20", "re-form: generation 1, world 4 (lost slots -, new slots 0)",
       "re-form: generation 2, world 4 (lost slots -, new slots 1)", "after 2 epochs, 32 steps, 2 re-forms"});
  CHECK(relative(final_loss(r.out), clean_loss) <= 1e-6);
  const auto start = trainer_slot_pids(r.out, "start"), end = trainer_slot_pids(r.out, "end");
  for (int slot : {2, 3}) CHECK(end.at(slot) == start.at(slot));
  for (int slot : {0, 1}) CHECK(end.at(slot) != start.at(slot));
}

TEST_CASE("reform: a trainer that does not catch MembershipChanged completes by restart, spending one") {
  TempDir dir;
  // One failure, one restart, as under --on_failure=restart: the restart of
  // every worker takes the place of the replacement it stops.
  const RunResult r = ddprun(four_ranks({"--on_failure=reform", "--max_restarts=1"}, dir,
                                        {"--kill-every", "10", "--kills", "1", "--no-catch"}),
                             dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err,
             Catch::Contains(
                 "did not catch ddp::MembershipChanged: falling back to --on_failure=restart for this run"));
  CHECK(count(r.err, "restarting workers (1/1)") == 1);
  check_contains(r.out, {"restart 1: world 4, rank killed -> next step", "0 re-forms, 1 restarts"});
}

TEST_CASE("reform: under --on_failure=restart the same trainer resumes from its checkpoint") {
  TempDir dir;
  const RunResult r =
      ddprun(four_ranks({"--max_restarts=1"}, dir, {"--kill-every", "20", "--kills", "1"}), dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // Killed after step 20, resumed after epoch 1 (step 16).
  check_contains(r.out, {"resuming from", "steps lost 4 (resumed after step 16, now 17)",
                         "after 2 epochs, 32 steps, 0 re-forms, 1 restarts"});
}
