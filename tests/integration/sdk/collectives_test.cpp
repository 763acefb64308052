// Every collective, op and dtype against reference results, ranks as processes.
#include <catch2/catch.hpp>

#include "sdk_job.hpp"

using namespace ddp::test;

namespace {
void run_collectives(int world, bool large) {
  SdkJob job;
  std::vector<std::string> argv{bin("ddp_sdk_test_worker").string(), "collectives"};
  if (large) argv.push_back("--large");
  const auto results = job.run(argv, world);
  INFO(describe(results));
  for (int r = 0; r < world; ++r) {
    CHECK(results[static_cast<std::size_t>(r)].code == 0);
    CHECK_THAT(results[static_cast<std::size_t>(r)].out, Catch::Contains("ok rank " + std::to_string(r)));
  }
}
}  // namespace

TEST_CASE("collectives match reference results with 2 ranks, including a 64 MiB all_reduce") {
  run_collectives(2, true);
}

TEST_CASE("collectives match reference results with 3 ranks") { run_collectives(3, false); }

TEST_CASE("collectives match reference results with 4 ranks") { run_collectives(4, false); }

TEST_CASE("collectives work in a group of one") { run_collectives(1, false); }

TEST_CASE("group, collective and wait timeouts past the clock's range mean wait, not fail at once") {
  SdkJob job;
  const auto results = job.run({bin("ddp_sdk_test_worker").string(), "far-timeouts"}, 2);
  INFO(describe(results));
  for (int r = 0; r < 2; ++r) {
    CHECK(results[static_cast<std::size_t>(r)].code == 0);
    CHECK_THAT(results[static_cast<std::size_t>(r)].out,
               Catch::Contains("far timeouts ok rank " + std::to_string(r) + " sum 2"));
  }
}
