#include "ddp/sampler.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "ddp/common/error.hpp"

using ddp::DistributedSampler;
using ddp::SamplerOptions;

namespace {
std::vector<std::vector<std::size_t>> shards(std::size_t n, int world, SamplerOptions o,
                                             std::uint64_t epoch = 0) {
  std::vector<std::vector<std::size_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}
}  // namespace

TEST_CASE("sampler without shuffle matches torch's layout, padding from the start") {
  // torch: DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)
  const auto s = shards(10, 3, {.shuffle = false, .seed = 0, .drop_last = false});
  CHECK(s[0] == std::vector<std::size_t>{0, 3, 6, 9});
  CHECK(s[1] == std::vector<std::size_t>{1, 4, 7, 0});
  CHECK(s[2] == std::vector<std::size_t>{2, 5, 8, 1});
}

TEST_CASE("sampler with drop_last truncates to floor(N / world) like torch") {
  const auto s = shards(10, 3, {.shuffle = false, .seed = 0, .drop_last = true});
  CHECK(s[0] == std::vector<std::size_t>{0, 3, 6});
  CHECK(s[1] == std::vector<std::size_t>{1, 4, 7});
  CHECK(s[2] == std::vector<std::size_t>{2, 5, 8});
}

TEST_CASE("sampler pads by wrapping around when the dataset is smaller than the world") {
  const auto s = shards(2, 5, {.shuffle = false, .seed = 0, .drop_last = false});
  for (const auto& shard : s) CHECK(shard.size() == 1);
  CHECK(s[2] == std::vector<std::size_t>{0});
  CHECK(s[3] == std::vector<std::size_t>{1});
  CHECK(shards(2, 5, {.shuffle = false, .seed = 0, .drop_last = true})[0].empty());
}

TEST_CASE("shuffled shards with drop_last are disjoint, equal in size and cover all but the tail") {
  for (std::size_t n : {1000u, 1001u, 1003u}) {
    for (int world : {1, 2, 3, 4, 7}) {
      const auto s = shards(n, world, {.shuffle = true, .seed = 42, .drop_last = true}, 3);
      std::set<std::size_t> seen;
      for (const auto& shard : s) {
        CHECK(shard.size() == n / static_cast<std::size_t>(world));
        for (auto i : shard) {
          CHECK(i < n);
          CHECK(seen.insert(i).second);  // disjoint
        }
      }
      CHECK(seen.size() == n - n % static_cast<std::size_t>(world));
    }
  }
}

TEST_CASE("shuffled shards without drop_last cover the whole dataset with equal counts") {
  for (std::size_t n : {1000u, 1001u, 7u}) {
    for (int world : {2, 3, 4}) {
      const auto s = shards(n, world, {.shuffle = true, .seed = 1, .drop_last = false}, 5);
      std::set<std::size_t> seen;
      const std::size_t expect = (n + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
      for (const auto& shard : s) {
        CHECK(shard.size() == expect);
        seen.insert(shard.begin(), shard.end());
      }
      CHECK(seen.size() == n);
    }
  }
}

TEST_CASE("set_epoch changes the order deterministically and every rank agrees") {
  SamplerOptions o{.shuffle = true, .seed = 7, .drop_last = false};
  DistributedSampler a(500, 2, 0, o), b(500, 2, 0, o);
  a.set_epoch(1);
  b.set_epoch(1);
  CHECK(a.indices() == b.indices());  // same seed + epoch -> same order on every process
  const auto epoch1 = a.indices();
  a.set_epoch(2);
  CHECK(a.indices() != epoch1);
  a.set_epoch(1);
  CHECK(a.indices() == epoch1);
  DistributedSampler other_seed(500, 2, 0, {.shuffle = true, .seed = 8, .drop_last = false});
  other_seed.set_epoch(1);
  CHECK(other_seed.indices() != epoch1);
}

TEST_CASE("the shuffled permutation does not depend on the world size") {
  // What makes world 4 x batch B equal world 1 x batch 4B in DDP.
  const auto one = shards(64, 1, {.shuffle = true, .seed = 3, .drop_last = true}, 2)[0];
  const auto four = shards(64, 4, {.shuffle = true, .seed = 3, .drop_last = true}, 2);
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(four[i % 4][i / 4] == one[i]);
}

TEST_CASE("sampler rejects a rank outside the world") {
  CHECK_THROWS_WITH(DistributedSampler(10, 2, 2), Catch::Contains("rank 2 is out of range"));
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), ddp::ConfigError);
}
