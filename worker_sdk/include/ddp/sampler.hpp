// DistributedSampler: the indices of a dataset that one rank visits in an epoch,
// with the semantics of torch.utils.data.distributed.DistributedSampler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp {

struct SamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  // true: drop the tail so every rank gets floor(N / world) distinct samples;
  // false: pad by repeating indices from the start so every rank gets
  // ceil(N / world) samples.
  bool drop_last = false;
};

// Every rank gets the same number of samples; with drop_last the shards are
// disjoint. Shuffling permutes all N indices with std::mt19937_64 seeded by
// seed + epoch followed by a Fisher-Yates shuffle, so every rank computes the
// same permutation without communicating. (It cannot match torch.randperm bit
// for bit; only the semantics are the same.) Rank r takes positions r, r+world,
// r+2*world, ... of the (padded or truncated) permutation, as torch does.
//
// Thread-safety: const members are safe to call concurrently; set_epoch is not.
class DistributedSampler {
 public:
  // Throws ddp::ConfigError for world_size < 1 or rank outside 0..world_size-1.
  DistributedSampler(std::size_t dataset_size, int world_size, int rank, SamplerOptions options = {});

  // Call at the start of every epoch, else every epoch has the same order.
  void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }
  std::uint64_t epoch() const { return epoch_; }

  std::size_t num_samples() const { return num_samples_; }  // per rank
  std::size_t total_size() const { return num_samples_ * static_cast<std::size_t>(world_size_); }
  std::vector<std::size_t> indices() const;  // this rank's indices for the current epoch

 private:
  std::size_t dataset_size_;
  int world_size_;
  int rank_;
  SamplerOptions options_;
  std::uint64_t epoch_ = 0;
  std::size_t num_samples_ = 0;
};

}  // namespace ddp
