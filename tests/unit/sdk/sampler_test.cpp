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

namespace {
// One epoch with world changes: ranks of world worlds[0] train on `steps[0]`
// samples each, then everyone re-shards to worlds[1] at the global count so
// far, and so on; the last world trains on all it is dealt. Returns every
// visited index (with repeats) and checks each world's shards are equal in size.
std::vector<std::size_t> run_epoch(std::size_t n, SamplerOptions o, const std::vector<int>& worlds,
                                   const std::vector<std::size_t>& steps, std::uint64_t epoch = 4) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < worlds[0]; ++r) {
    ranks.emplace_back(n, worlds[0], r, o);
    ranks.back().set_epoch(epoch);
  }
  std::vector<std::size_t> visited;
  std::size_t consumed = 0;
  for (std::size_t phase = 0; phase < worlds.size(); ++phase) {
    const bool last = phase + 1 == worlds.size();
    std::size_t took = 0;
    for (auto& s : ranks) {
      const auto mine = s.indices();
      CHECK(mine.size() == ranks[0].num_samples());
      took = last ? mine.size() : std::min(steps[phase], mine.size());
      visited.insert(visited.end(), mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(took));
    }
    consumed += took * ranks.size();
    if (last) break;
    // The re-formed world: survivors (and replacements) take ranks 0..W'-1.
    const int next = worlds[phase + 1];
    if (static_cast<int>(ranks.size()) > next) ranks.resize(static_cast<std::size_t>(next), ranks[0]);
    while (static_cast<int>(ranks.size()) < next) {  // a joiner: a fresh sampler told the epoch
      ranks.emplace_back(n, next, static_cast<int>(ranks.size()), o);
      ranks.back().set_epoch(epoch);
    }
    for (int r = 0; r < next; ++r) ranks[static_cast<std::size_t>(r)].reshard(next, r, consumed);
  }
  return visited;
}
}  // namespace

TEST_CASE("reshard mid-epoch visits every index once across world changes (drop_last)") {
  const SamplerOptions o{.shuffle = true, .seed = 11, .drop_last = true};
  for (std::size_t n : {1000u, 1001u, 1003u}) {
    for (const std::vector<int>& worlds :
         {std::vector<int>{4, 3}, {4, 4}, {3, 4}, {4, 3, 4}, {4, 2, 3, 1}, {1, 4}}) {
      for (std::size_t at : {0u, 1u, 17u, 100u}) {
        CAPTURE(n, worlds, at);
        const auto visited = run_epoch(n, o, worlds, std::vector<std::size_t>(worlds.size(), at));
        const std::set<std::size_t> unique(visited.begin(), visited.end());
        CHECK(unique.size() == visited.size());  // nothing twice
        // Only the tail is left out: fewer than the last world's size.
        CHECK(n - visited.size() < static_cast<std::size_t>(worlds.back()));
        for (auto i : visited) CHECK(i < n);
      }
    }
  }
}

TEST_CASE("reshard mid-epoch without drop_last visits every index, repeating only the padding") {
  const SamplerOptions o{.shuffle = true, .seed = 5, .drop_last = false};
  for (std::size_t n : {1000u, 1001u, 1003u, 7u}) {
    for (const std::vector<int>& worlds : {std::vector<int>{4, 3}, {4, 4}, {3, 4}, {4, 3, 4}, {2, 5}}) {
      for (std::size_t at : {0u, 1u, 33u}) {
        CAPTURE(n, worlds, at);
        const auto visited = run_epoch(n, o, worlds, std::vector<std::size_t>(worlds.size(), at));
        const std::set<std::size_t> unique(visited.begin(), visited.end());
        CHECK(unique.size() == n);                                            // the whole dataset
        CHECK(visited.size() - n < static_cast<std::size_t>(worlds.back()));  // padding only
      }
    }
  }
}

TEST_CASE("reshard to the same world deals each rank exactly the rest of its shard") {
  for (bool drop_last : {true, false}) {
    const SamplerOptions o{.shuffle = true, .seed = 9, .drop_last = drop_last};
    for (int r = 0; r < 4; ++r) {
      DistributedSampler s(1003, 4, r, o);
      s.set_epoch(2);
      const auto before = s.indices();
      s.reshard(4, r, 4 * 40);
      const auto after = s.indices();
      CHECK(after == std::vector<std::size_t>(before.begin() + 40, before.end()));
      CHECK(s.total_size() == 4 * before.size());
      CHECK(s.consumed() == 160);
    }
  }
}

TEST_CASE("reshard after the padding was dealt leaves nothing, and set_epoch starts over") {
  DistributedSampler s(10, 4, 1, {.shuffle = false, .seed = 0, .drop_last = false});
  s.set_epoch(0);
  CHECK(s.total_size() == 12);
  s.reshard(3, 2, 11);
  CHECK(s.indices().empty());
  s.reshard(1, 0, 12);  // all the padding trained on: the epoch is over
  CHECK(s.indices().empty());
  s.set_epoch(1);  // the next epoch, in the world of the last reshard
  CHECK(s.consumed() == 0);
  CHECK(s.world_size() == 1);
  CHECK(s.indices().size() == 10);
}

TEST_CASE("reshard without shuffle deals the rest in torch's layout") {
  DistributedSampler s(10, 2, 0, {.shuffle = false, .seed = 0, .drop_last = false});
  s.reshard(3, 1, 4);  // 0..3 trained; 4..9 left for three ranks
  CHECK(s.indices() == std::vector<std::size_t>{5, 8});
  s.reshard(3, 0, 4);
  CHECK(s.indices() == std::vector<std::size_t>{4, 7});
  s.reshard(4, 3, 6);  // 6..9 left for four ranks
  CHECK(s.indices() == std::vector<std::size_t>{9});
  s.reshard(4, 0, 7);  // three left: one position of padding, P[0]
  s.reshard(4, 3, 7);
  CHECK(s.indices() == std::vector<std::size_t>{0});
}

TEST_CASE("reshard rejects bad arguments naming them") {
  DistributedSampler s(100, 4, 0);
  CHECK_THROWS_WITH(s.reshard(0, 0, 0), Catch::Contains("world_size must be >= 1, got 0"));
  CHECK_THROWS_WITH(s.reshard(3, 3, 0), Catch::Contains("rank 3 is out of range 0..2"));
  CHECK_THROWS_WITH(s.reshard(3, -1, 0), Catch::Contains("rank -1"));
  CHECK_THROWS_WITH(s.reshard(3, 0, 104), Catch::Contains("consumed 104 is outside 0..103"));
  DistributedSampler d(100, 4, 0, {.shuffle = true, .seed = 0, .drop_last = true});
  CHECK_THROWS_WITH(d.reshard(4, 0, 101), Catch::Contains("consumed 101 is outside 0..100"));
  s.reshard(3, 0, 40);
  CHECK_THROWS_AS(s.reshard(3, 0, 39), ddp::ConfigError);  // never backwards
  CHECK_THROWS_AS(s.reshard(3, 0, 0), ddp::ConfigError);
  CHECK(s.consumed() == 40);  // a rejected reshard changes nothing
  CHECK(s.world_size() == 3);
}
