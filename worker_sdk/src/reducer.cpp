#include "ddp/reducer.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "backend.hpp"
#include "ddp/common/error.hpp"
#include "ddp/process_group.hpp"

namespace ddp {

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<std::size_t>& param_bytes,
                                                   const ReducerOptions& options) {
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<std::size_t> current;
  std::size_t current_bytes = 0;
  for (std::size_t i = param_bytes.size(); i-- > 0;) {
    current.push_back(i);
    current_bytes += param_bytes[i];
    const std::size_t cap = buckets.empty() ? options.first_bucket_cap_bytes : options.bucket_cap_bytes;
    if (current_bytes >= cap) {
      buckets.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

Reducer::Reducer(ProcessGroup& group, std::vector<std::span<float>> grads, ReducerOptions options)
    : group_(group), device_(detail::backend_of(group).device_buffers()), grads_(std::move(grads)) {
  std::vector<std::size_t> bytes;
  bytes.reserve(grads_.size());
  for (const auto& g : grads_) bytes.push_back(g.size_bytes());
  plan_ = plan_buckets(bytes, options);
  bucket_of_.resize(grads_.size());
  buckets_.resize(plan_.size());
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    std::size_t elements = 0;
    for (std::size_t p : plan_[b]) {
      bucket_of_[p] = b;
      elements += grads_[p].size();
    }
    buckets_[b].params = plan_[b];
    buckets_[b].elements = elements;
    if (device_) {
      buckets_[b].device =
          static_cast<float*>(detail::backend_of(group_).device_alloc(elements * sizeof(float)));
    } else {
      buckets_[b].flat.resize(elements);
    }
  }
  ready_.assign(grads_.size(), false);
  reset_step();
}

Reducer::~Reducer() {
  // The all-reduces write into our buckets. While an exception unwinds, do not
  // wait for them (peers may never finish them): keep the buckets alive until
  // the process exits instead, as ProcessGroup keeps its connections.
  if (std::uncaught_exceptions() > 0) {
    bool in_flight = false;
    for (const auto& bucket : buckets_) in_flight = in_flight || !bucket.work.is_completed();
    if (in_flight) {
      static auto* kept = new std::vector<std::vector<Bucket>>();  // never freed, on purpose
      static std::mutex mu;
      std::lock_guard lock(mu);
      kept->push_back(std::move(buckets_));
      return;
    }
  }
  // Otherwise let them finish (each is bounded by its timeout) before the memory
  // goes away. Errors were the caller's to see.
  for (auto& bucket : buckets_) {
    try {
      bucket.work.wait();
    } catch (...) {
    }
    if (bucket.device != nullptr) detail::backend_of(group_).device_free(bucket.device);
  }
}

void Reducer::reset_step() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.launched = false;
  }
  next_launch_ = 0;
}

void Reducer::mark_ready(std::size_t index) {
  if (!sync_enabled_) return;
  if (index >= grads_.size()) {
    throw ConfigError("Reducer::mark_ready: index " + std::to_string(index) + " out of range (" +
                      std::to_string(grads_.size()) + " parameters registered)");
  }
  if (ready_[index]) {
    throw ConfigError("Reducer::mark_ready: parameter " + std::to_string(index) +
                      " was marked ready twice in one step; call finalize() between steps");
  }
  ready_[index] = true;
  --buckets_[bucket_of_[index]].pending;
  launch_ready_buckets();
}

// Buckets launch strictly in bucket order, even if a later one fills first, so
// every rank issues the same sequence of collectives.
void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_++];
    float* out = bucket_data(bucket);
    for (std::size_t p : bucket.params) {
      if (device_) {
        detail::backend_of(group_).device_copy(out, grads_[p].data(), grads_[p].size_bytes());
      } else {
        std::memcpy(out, grads_[p].data(), grads_[p].size_bytes());
      }
      out += grads_[p].size();
    }
    // On a device the average is the collective's (NCCL's ncclAvg); on the
    // host a sum, scaled while copying back.
    bucket.work = group_.all_reduce_async(bucket_data(bucket), bucket.elements, DataType::kFloat32,
                                          device_ ? ReduceOp::kAvg : ReduceOp::kSum);
    bucket.launched = true;
  }
}

// The Work handles stay: the next step replaces them, and the destructor still
// waits for them before freeing the buckets.
void Reducer::discard_step() { reset_step(); }

void Reducer::finalize() {
  if (!sync_enabled_) return;
  for (auto& bucket : buckets_) bucket.pending = 0;
  launch_ready_buckets();
  const float scale = 1.0f / static_cast<float>(group_.size());
  std::exception_ptr error;
  for (auto& bucket : buckets_) {
    try {
      bucket.work.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
      continue;
    }
    const float* in = bucket_data(bucket);
    for (std::size_t p : bucket.params) {
      float* g = grads_[p].data();
      if (device_) {
        detail::backend_of(group_).device_copy(g, in, grads_[p].size_bytes());
      } else {
        for (std::size_t i = 0, n = grads_[p].size(); i < n; ++i) g[i] = in[i] * scale;
      }
      in += grads_[p].size();
    }
  }
  if (device_ && !error) detail::backend_of(group_).device_synchronize();
  reset_step();
  if (error) std::rethrow_exception(error);
}

}  // namespace ddp
