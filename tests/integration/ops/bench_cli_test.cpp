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

TEST_CASE(
    "ddp-bench echo-floor prints a bare server's CPU per client for each count of round trips, and the fit",
    "[ops][bench]") {
  TempDir dir;
  auto r = run(
      {bin("ddp-bench").string(), "echo-floor", "--agents", "20", "--round-trips", "0", "2", "--reps", "1"},
      dir.path(), {}, 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("20 clients, 100 bytes each way per round trip"));
  CHECK_THAT(r.out, Catch::Matches("(.|\n)*\n +0 +[0-9.]+ +[0-9.]+-[0-9.]+ *\n +2 +[0-9.]+ (.|\n)*"));
  CHECK_THAT(r.out, Catch::Contains("µs per connection (accept to close) +") &&
                        Catch::Contains("µs per round trip"));
  // Too many clients for any limit on descriptors: skipped in one line saying what to raise.
  auto big = run({bin("ddp-bench").string(), "echo-floor", "--agents", "3000000"}, dir.path(), {}, 60s);
  INFO(big.out << big.err);
  CHECK(big.code == 0);
  CHECK_THAT(big.out, Catch::Contains("skipped: needs") && Catch::Contains("raise the open-file limit"));
  auto bad = run({bin("ddp-bench").string(), "echo-floor", "--bytes", "4"}, dir.path(), {}, 60s);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("ddp-bench echo-floor: --bytes"));
}

TEST_CASE(
    "ddp-bench's benches of simulated clients refuse --max-connecting 0 in one line (they would wait "
    "forever)",
    "[ops][bench]") {
  TempDir dir;
  for (const char* sub : {"echo-floor", "rendezvous", "bootstrap", "expiry"}) {
    INFO(sub);
    auto r =
        run({bin("ddp-bench").string(), sub, "--agents", "2", "--max-connecting", "0"}, dir.path(), {}, 20s);
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(std::string("ddp-bench ") + sub + ": --max-connecting"));
  }
}
