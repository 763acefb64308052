// Reducer: DDP's gradient bucketing. Gradients are grouped into buckets in
// reverse registration order (the order backward produces them); a bucket's
// all-reduce starts as soon as its last gradient is marked ready, so
// communication overlaps the rest of the backward pass.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "ddp/work.hpp"

namespace ddp {

class ProcessGroup;

struct ReducerOptions {
  // PyTorch's defaults: 25 MiB buckets, and a 1 MiB first bucket so the first
  // all-reduce starts early in the backward pass.
  std::size_t bucket_cap_bytes = 25u << 20;
  std::size_t first_bucket_cap_bytes = 1u << 20;
};

// Which parameters (registration indices) each bucket holds, in launch order.
// Walks the parameters from last to first, closing a bucket once it holds at
// least its cap (torch's compute_bucket_assignment_by_size), so one parameter
// larger than the cap gets a bucket of its own.
std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<std::size_t>& param_bytes,
                                                   const ReducerOptions& options);

// Usage per step: backward computes gradients into the registered spans and
// calls mark_ready(i) for each as it is done; then finalize() before the
// optimizer step. Gradients never marked are treated as ready at finalize()
// (which then simply all-reduces after backward).
//
// Not thread-safe: call from the thread running backward. The spans must stay
// valid for the Reducer's lifetime; the group must outlive it.
//
// With an NCCL group the gradients are device memory (spans over device
// pointers): the buckets are then device buffers too, a gradient is copied in
// on the group's stream after the work already queued on the CUDA legacy
// default stream, the average is NCCL's, and finalize() returns once the
// averaged gradients are back in place on the device.
class Reducer {
 public:
  Reducer(ProcessGroup& group, std::vector<std::span<float>> grads, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Gradient `index` (registration order) holds its final value for this step.
  // Launches the all-reduce of every bucket that became complete, in bucket
  // order, so all ranks issue the same sequence. Throws ddp::ConfigError for an
  // index marked twice in one step or out of range.
  void mark_ready(std::size_t index);
  // Launches what is left, waits for every bucket and writes the average over
  // the group back into the gradients. Rethrows a collective's error.
  void finalize();
  // Forgets the current step: after a collective failed (ddp::MembershipChanged
  // mid-step) call it, then re-form the group (ElasticGroup::reform) and redo
  // the step. Does not wait for the step's in-flight all-reduces: they end when
  // the group is re-formed (or by their timeout).
  void discard_step();

  // RAII scope for gradient accumulation: inside it mark_ready and finalize do
  // not communicate, so gradients accumulate locally; the first step after the
  // scope reduces the accumulated gradients (torch's DDP.no_sync()).
  class NoSync {
   public:
    explicit NoSync(Reducer& reducer) : reducer_(reducer), previous_(reducer.sync_enabled_) {
      reducer_.sync_enabled_ = false;
    }
    ~NoSync() { reducer_.sync_enabled_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    Reducer& reducer_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  const std::vector<std::vector<std::size_t>>& buckets() const { return plan_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;
    std::vector<float> flat;  // host backends
    float* device = nullptr;  // device backends: `elements` floats on the group's GPU
    std::size_t elements = 0;
    std::size_t pending = 0;  // gradients not yet ready this step
    bool launched = false;
    Work work;
  };
  void launch_ready_buckets();
  void reset_step();

  float* bucket_data(Bucket& bucket) { return device_ ? bucket.device : bucket.flat.data(); }

  ProcessGroup& group_;
  bool device_ = false;  // the group's buffers live on a GPU
  std::vector<std::span<float>> grads_;
  std::vector<std::vector<std::size_t>> plan_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // param index -> bucket
  std::vector<bool> ready_;
  std::size_t next_launch_ = 0;
  bool sync_enabled_ = true;
};

}  // namespace ddp
