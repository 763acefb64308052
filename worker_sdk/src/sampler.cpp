#include "ddp/sampler.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "ddp/common/error.hpp"

namespace ddp {

namespace {
void check_world(const char* what, int world_size, int rank) {
  if (world_size < 1) {
    throw ConfigError(std::string("DistributedSampler") + what + ": world_size must be >= 1, got " +
                      std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw ConfigError(std::string("DistributedSampler") + what + ": rank " + std::to_string(rank) +
                      " is out of range 0.." + std::to_string(world_size - 1));
  }
}
}  // namespace

DistributedSampler::DistributedSampler(std::size_t dataset_size, int world_size, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), options_(options) {
  check_world("", world_size, rank);
  deal();
}

void DistributedSampler::deal() {
  const auto world = static_cast<std::size_t>(world_size_);
  const std::size_t rest = dataset_size_ > consumed_ ? dataset_size_ - consumed_ : 0;
  num_samples_ = options_.drop_last ? rest / world : (rest + world - 1) / world;
}

void DistributedSampler::set_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  consumed_ = 0;
  deal();
}

void DistributedSampler::reshard(int world_size, int rank, std::size_t consumed) {
  check_world("::reshard", world_size, rank);
  // A sequence never runs past N (drop_last) or past N plus fewer than one
  // world of padding; a joiner's sampler may not know the old world, so the
  // bound takes the larger of the two.
  const std::size_t most =
      options_.drop_last ? dataset_size_
                         : dataset_size_ + static_cast<std::size_t>(std::max(world_size, world_size_)) - 1;
  if (consumed < consumed_ || consumed > most) {
    throw ConfigError("DistributedSampler::reshard: consumed " + std::to_string(consumed) + " is outside " +
                      std::to_string(consumed_) + ".." + std::to_string(most) + " (the rest of epoch " +
                      std::to_string(epoch_) + ")");
  }
  world_size_ = world_size;
  rank_ = rank;
  consumed_ = consumed;
  deal();
}

std::vector<std::size_t> DistributedSampler::indices() const {
  std::vector<std::size_t> order(dataset_size_);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (options_.shuffle && dataset_size_ > 1) {
    // Fisher-Yates written out: std::shuffle's use of the engine is
    // implementation-defined, and every rank (and every build) must agree.
    std::mt19937_64 rng(options_.seed + epoch_);
    for (std::size_t i = dataset_size_ - 1; i > 0; --i) {
      // Rejection sampling keeps the draw unbiased (std::uniform_int_distribution
      // is also implementation-defined).
      const std::uint64_t bound = i + 1;
      const std::uint64_t limit =
          std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % bound;
      std::uint64_t x = rng();
      while (x >= limit) x = rng();
      std::swap(order[i], order[static_cast<std::size_t>(x % bound)]);
    }
  }
  // Position p of the epoch's sequence is order[p % N]: past N it pads by
  // repeating from the start (wrapping as often as needed), like torch.
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  const auto world = static_cast<std::size_t>(world_size_);
  for (std::size_t i = 0; i < num_samples_; ++i) {
    mine.push_back(order[(consumed_ + static_cast<std::size_t>(rank_) + i * world) % dataset_size_]);
  }
  return mine;
}

}  // namespace ddp
