// ddp-bench's own messages: a run skipped for want of file descriptors says
// what would help, given the flags it was run with.
#include <catch2/catch.hpp>

#include "ops_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

TEST_CASE("ddp-bench's skip for too few descriptors asks for --endpoint only when it was not given",
          "[ops][bench]") {
  TempDir dir;
  // More connections than the kernel allows any process (fs.nr_open), so no
  // raise of the limit can make room, root or not.
  const std::string agents = "3000000";
  for (const char* sub : {"expiry", "rendezvous"}) {
    INFO(sub);
    auto with = run({bin("ddp-bench").string(), sub, "--endpoint", "127.0.0.1:1", "--agents", agents},
                    dir.path(), {}, 60s);
    INFO(with.out << with.err);
    CHECK(with.code == 0);
    CHECK_THAT(with.out, Catch::Contains("skipped: needs") && Catch::Contains("raise the open-file limit"));
    CHECK_THAT(with.out, !Catch::Contains("--endpoint"));  // before: "pass --endpoint", though it was
    auto without = run({bin("ddp-bench").string(), sub, "--agents", agents}, dir.path(), {}, 60s);
    INFO(without.out << without.err);
    CHECK_THAT(without.out, Catch::Contains("skipped: needs") && Catch::Contains("pass --endpoint"));
  }
}
