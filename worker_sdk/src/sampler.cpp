#include "ddp/sampler.hpp"

#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "ddp/common/error.hpp"

namespace ddp {

DistributedSampler::DistributedSampler(std::size_t dataset_size, int world_size, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), options_(options) {
  if (world_size < 1) throw ConfigError("DistributedSampler: world_size must be >= 1");
  if (rank < 0 || rank >= world_size) {
    throw ConfigError("DistributedSampler: rank " + std::to_string(rank) + " is out of range 0.." +
                      std::to_string(world_size - 1));
  }
  const auto world = static_cast<std::size_t>(world_size);
  num_samples_ = options.drop_last ? dataset_size / world : (dataset_size + world - 1) / world;
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
  const std::size_t total = total_size();
  if (total <= order.size()) {
    order.resize(total);
  } else if (!order.empty()) {
    // Pad by repeating from the start (wrapping as often as needed), like torch.
    const std::size_t original = order.size();
    order.reserve(total);
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % original]);
  }
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < order.size();
       i += static_cast<std::size_t>(world_size_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

}  // namespace ddp
