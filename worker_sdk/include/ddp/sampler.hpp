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
// Re-sharding mid-epoch (after a re-form changed the world, docs/reform.md):
// call the epoch's order P (the permutation of all N indices) and the epoch's
// sequence S the positions the ranks deal out: S[p] = P[p % N] for
// p < total_size(), so past N it pads by repeating the start of P. Rank r takes
// S[consumed + r], S[consumed + r + world], ... When every rank trained on the
// same number of samples, what the job has trained on is exactly the prefix
// S[0, consumed). reshard(world, rank, consumed) keeps that prefix and deals
// the rest of the epoch, P[consumed, N), among the new world:
//   drop_last: each rank gets floor((N - consumed) / world) samples; the last
//     (N - consumed) % world indices of P (fewer than the new world) are not
//     visited this epoch. Nothing is visited twice.
//   no drop_last: each rank gets ceil((N - consumed) / world) samples; the
//     fewer-than-world extra positions repeat P from its start (P[0], P[1], ...),
//     as at an epoch start. Padding the old world dealt but nobody trained on
//     is forgotten. Every index is visited; only these padding positions twice.
// Positions in S keep their meaning across re-shards (S[p] = P[p] for p < N),
// so consumed always counts from the start of the epoch and several re-shards
// in one epoch compose. With an unchanged world a re-shard deals exactly what
// the ranks had left, so a replaced worker changes no step's samples.
// set_epoch() starts the next epoch from consumed = 0 with the current world.
//
// Thread-safety: const members are safe to call concurrently; set_epoch and
// reshard are not.
class DistributedSampler {
 public:
  // Throws ddp::ConfigError for world_size < 1 or rank outside 0..world_size-1.
  DistributedSampler(std::size_t dataset_size, int world_size, int rank, SamplerOptions options = {});

  // Call at the start of every epoch, else every epoch has the same order.
  // Resets consumed() to 0.
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const { return epoch_; }

  // Deals the rest of the current epoch, after `consumed` positions of its
  // sequence, among a world of world_size with this rank as `rank` (see
  // above). Throws ddp::ConfigError naming the argument for world_size < 1,
  // rank outside 0..world_size-1, or consumed below consumed() or past the
  // epoch's end (N with drop_last, else N + max(old, new world) - 1).
  void reshard(int world_size, int rank, std::size_t consumed);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  std::size_t consumed() const { return consumed_; }        // where this rank's share starts in the epoch
  std::size_t num_samples() const { return num_samples_; }  // per rank, from consumed() on
  // Length of the epoch's sequence as now dealt: consumed() + world * num_samples().
  std::size_t total_size() const { return consumed_ + num_samples_ * static_cast<std::size_t>(world_size_); }
  std::vector<std::size_t> indices() const;  // this rank's indices for the rest of the current epoch

 private:
  std::size_t dataset_size_;
  int world_size_;
  int rank_;
  SamplerOptions options_;
  std::uint64_t epoch_ = 0;
  std::size_t consumed_ = 0;
  std::size_t num_samples_ = 0;

  void deal();  // num_samples_ from dataset_size_, world_size_ and consumed_
};

}  // namespace ddp
