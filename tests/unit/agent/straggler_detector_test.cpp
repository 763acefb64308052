// The straggler rule (docs/agent-diagnosis.md, "Stragglers"): over factor x the job's
// median for N steps in a row, counted in the steps each look adds.
#include "straggler_detector.hpp"

#include <catch2/catch.hpp>

using namespace ddp::agent;

namespace {

// Four ranks on two nodes; rank 3 takes `slow_s` per step, the others 0.25 s.
std::vector<RankSteps> four_ranks(std::uint64_t steps, double slow_s) {
  return {{0, "node0", "h0", steps, 0.25},
          {1, "node0", "h0", steps, 0.26},
          {2, "node1", "h1", steps, 0.24},
          {3, "node1", "h1", steps, slow_s}};
}

}  // namespace

TEST_CASE("the lower median is the middle value, and the faster of the middle two") {
  CHECK(lower_median({}) < 0);
  CHECK(lower_median({3.0}) == 3.0);
  CHECK(lower_median({5.0, 1.0}) == 1.0);
  CHECK(lower_median({4.0, 1.0, 3.0, 2.0}) == 2.0);
  CHECK(lower_median({9.0, 1.0, 5.0}) == 5.0);
}

TEST_CASE("a rank over the factor is named once its slow steps in a row reach the count") {
  StragglerDetector d(3.0, 5);
  // Two steps each look: after two looks 4 slow steps, after three 6.
  auto v = d.update(four_ranks(2, 1.0));
  CHECK(v.ranks == 4);
  CHECK(v.median_s == Approx(0.25));
  CHECK(v.stragglers.empty());
  CHECK(d.update(four_ranks(4, 1.0)).stragglers.empty());
  v = d.update(four_ranks(6, 1.0));
  REQUIRE(v.stragglers.size() == 1);
  const auto& s = v.stragglers[0];
  CHECK(s.rank == 3);
  CHECK(s.node == "node1");
  CHECK(s.host == "h1");
  CHECK(s.step_s == Approx(1.0));
  CHECK(s.median_s == Approx(0.25));
  CHECK(s.factor == Approx(4.0));
  CHECK(s.slow_steps == 6);
}

TEST_CASE("a look without new steps neither counts nor clears, and one fast step clears") {
  StragglerDetector d(3.0, 2);
  REQUIRE(d.update(four_ranks(3, 1.0)).stragglers.size() == 1);
  // Same counters again (a record not rewritten yet): still named.
  REQUIRE(d.update(four_ranks(3, 1.0)).stragglers.size() == 1);
  // Its next interval's steps are normal: no longer named, and counting starts over.
  CHECK(d.update(four_ranks(5, 0.3)).stragglers.empty());
  CHECK(d.update(four_ranks(6, 1.0)).stragglers.empty());
  CHECK(d.update(four_ranks(7, 1.0)).stragglers.size() == 1);
}

TEST_CASE("even ranks, a rank just under the factor, or a lone rank name nobody") {
  StragglerDetector even(2.0, 1);
  CHECK(even.update(four_ranks(10, 0.25)).stragglers.empty());
  CHECK(even.update(four_ranks(20, 0.49)).stragglers.empty());
  StragglerDetector alone(2.0, 1);
  CHECK(alone.update({{0, "node0", "h0", 10, 5.0}}).stragglers.empty());
}

TEST_CASE("ranks without a step time yet are left out of the median") {
  StragglerDetector d(2.0, 1);
  auto v = d.update({{0, "node0", "h0", 0, -1},
                     {1, "node0", "h0", 4, 0.2},
                     {2, "node1", "h1", 4, 0.2},
                     {3, "node1", "h1", 4, 1.0}});
  CHECK(v.ranks == 3);
  CHECK(v.median_s == Approx(0.2));
  REQUIRE(v.stragglers.size() == 1);
  CHECK(v.stragglers[0].rank == 3);
}

TEST_CASE("after a reset a rank's steps count from the new round") {
  StragglerDetector d(2.0, 4);
  CHECK(d.update(four_ranks(3, 1.0)).stragglers.empty());
  d.reset();
  // A new round's counters start low again: its first 2 steps count, so 2
  // more make 4 (kept from the old round, the drop would start over at 0).
  CHECK(d.update(four_ranks(2, 1.0)).stragglers.empty());
  CHECK(d.update(four_ranks(4, 1.0)).stragglers.size() == 1);
}
