// The interface every collective backend implements (private to the SDK).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "ddp/process_group.hpp"
#include "work_state.hpp"

namespace ddp::store {
class Store;
}

namespace ddp::detail {

using Millis = std::chrono::milliseconds;

struct BackendConfig {
  std::shared_ptr<store::Store> store;
  std::string key_prefix;  // unique to this group instance, ends with '/'
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  // Given to every Work of the group (Work::State::hooks); null: none.
  std::shared_ptr<const WorkHooks> hooks;
  // Gloo: how long each connection may take to come up while the group
  // connects (a peer that died mid-connect never does); 0: options.timeout,
  // which Gloo stretches five times. Waits for the peers' addresses in the
  // store keep options.timeout.
  std::chrono::milliseconds connect_timeout{0};
};

// Arguments are validated by ProcessGroup before they get here; `timeout` is
// already resolved to a positive value. `sync`: the caller waits for the Work
// at once, so the backend may run the operation on the calling thread.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Work all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Millis timeout,
                          bool sync) = 0;
  virtual Work broadcast(void* data, std::size_t count, DataType type, int root, Millis timeout,
                         bool sync) = 0;
  virtual Work all_gather(const void* input, void* output, std::size_t count, DataType type, Millis timeout,
                          bool sync) = 0;
  virtual Work reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                              Millis timeout, bool sync) = 0;
  virtual Work barrier(Millis timeout, bool sync) = 0;

  // Called once before the backend is destroyed to re-form the group
  // (ElasticGroup::reform): close the connections so that peers blocked on
  // this rank fail at once, fail what is in flight instead of waiting for it,
  // and do not tear down politely with peers that may be gone.
  virtual void abort() {}
  // After abort(): whether the operation running (if any) ended within `timeout`.
  virtual bool wait_idle(Millis /*timeout*/) { return true; }

  // Device memory, for a backend whose buffers live on a GPU (nccl): the
  // Reducer keeps its buckets there. A host backend has none.
  virtual bool device_buffers() const { return false; }
  virtual void* device_alloc(std::size_t bytes);
  virtual void device_free(void* p) noexcept;
  // Device to device on the group's stream, after the work already queued on
  // the CUDA legacy default stream and before the group's next collective.
  virtual void device_copy(void* dst, const void* src, std::size_t bytes);
  // Returns when everything queued on the group's stream has finished.
  virtual void device_synchronize();
};

// The backend behind a group (for the Reducer).
Backend& backend_of(ProcessGroup& group);

std::unique_ptr<Backend> make_gloo_backend(const BackendConfig& config);
// Throws ConfigError when the SDK was built without NCCL.
std::unique_ptr<Backend> make_nccl_backend(const BackendConfig& config);
bool cuda_device_present();

// Waits until every rank of the group has written its join key, so that a rank
// that never starts is reported by number instead of as a transport timeout.
void join_group(store::Store& store, const std::string& key_prefix, int rank, int size, Millis timeout,
                std::string_view what);

}  // namespace ddp::detail
