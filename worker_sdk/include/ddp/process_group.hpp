// ProcessGroup: collectives among the ranks of a job, over Gloo (CPU memory) or
// NCCL (CUDA device memory). Mirrors torch.distributed's process group.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <ranges>
#include <string>
#include <string_view>

#include "ddp/types.hpp"
#include "ddp/work.hpp"

namespace ddp {

class ProcessGroup;
class ElasticGroup;
namespace detail {
class Backend;
struct WorkHooks;
Backend& backend_of(ProcessGroup& group);  // SDK-internal
}  // namespace detail

namespace store {
class Store;
}
struct Context;

struct ProcessGroupOptions {
  // "gloo", "nccl", or "auto": nccl when the SDK was built with it and a CUDA
  // device is visible, gloo otherwise.
  std::string backend = "auto";
  // Default per-operation timeout (torch's default is 30 minutes too). A
  // collective that has not completed by then fails with ddp::TimeoutError
  // naming the rank and the operation, and the group becomes unusable.
  // Longer than about 34 years (ddp::kMaxDuration; milliseconds::max() for
  // "forever") counts as that long.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Names the group's keys in the store. Groups are numbered per name in the
  // order each rank creates them, so every rank must create its groups in the
  // same order (as with torch.distributed.new_group).
  std::string name = "default";
  // NCCL only: the CUDA device index; -1 means LOCAL_RANK.
  int device = -1;
  // Gloo only: network interface to bind (overrides DDP_GLOO_IFNAME / GLOO_SOCKET_IFNAME).
  std::string interface;
};

// Per-call settings.
struct OpOptions {
  // 0: the group's default timeout. Capped like ProcessGroupOptions::timeout.
  std::chrono::milliseconds timeout{0};
};

// Collective calls must be issued in the same order on every rank. Operations
// run one after another in issue order on the group's own thread (Gloo) or
// stream (NCCL); the *_async forms return at once.
//
// Thread-safety: calls may come from several threads, but then the caller must
// make sure every rank issues them in the same order. Destruction waits for
// running operations to finish or time out.
class ProcessGroup {
 public:
  // Connects `world_size` ranks through `store`; every rank constructs its group
  // with the same options. Blocks until all ranks have joined or options.timeout
  // passes (ddp::TimeoutError).
  ProcessGroup(std::shared_ptr<store::Store> store, std::string key_prefix, int rank, int world_size,
               ProcessGroupOptions options = {});
  // Uses the store, prefix, rank and size from ddp::init().
  explicit ProcessGroup(const Context& context, ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;

  int rank() const;
  int size() const;
  std::string_view backend() const;  // "gloo" or "nccl"

  // In place: every rank ends with op(data of all ranks).
  Work all_reduce_async(void* data, std::size_t count, DataType type, ReduceOp op, OpOptions options = {});
  // In place: every rank ends with root's data.
  Work broadcast_async(void* data, std::size_t count, DataType type, int root, OpOptions options = {});
  // `output` holds size() * count elements: rank r's `input` lands at r * count.
  Work all_gather_async(const void* input, void* output, std::size_t count, DataType type,
                        OpOptions options = {});
  // `input` holds size() * count elements; rank r receives op over all ranks of
  // the r-th chunk of `count` elements into `output`.
  Work reduce_scatter_async(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                            OpOptions options = {});
  Work barrier_async(OpOptions options = {});

  // Blocking forms. When nothing else is queued on the group they run on the
  // calling thread, saving the hand-off to the group's thread.
  void all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, OpOptions options = {});
  void broadcast(void* data, std::size_t count, DataType type, int root, OpOptions options = {});
  void all_gather(const void* input, void* output, std::size_t count, DataType type, OpOptions options = {});
  void reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                      OpOptions options = {});
  void barrier(OpOptions options = {});

  // Typed forms over any contiguous range (std::vector, std::span, std::array).
  template <std::ranges::contiguous_range R>
  Work all_reduce_async(R&& data, ReduceOp op = ReduceOp::kSum, OpOptions options = {}) {
    using T = std::ranges::range_value_t<R>;
    return all_reduce_async(std::ranges::data(data), std::ranges::size(data), dtype_of<T>(), op, options);
  }
  template <std::ranges::contiguous_range R>
  void all_reduce(R&& data, ReduceOp op = ReduceOp::kSum, OpOptions options = {}) {
    using T = std::ranges::range_value_t<R>;
    all_reduce(std::ranges::data(data), std::ranges::size(data), dtype_of<T>(), op, options);
  }
  template <std::ranges::contiguous_range R>
  void broadcast(R&& data, int root, OpOptions options = {}) {
    using T = std::ranges::range_value_t<R>;
    broadcast(std::ranges::data(data), std::ranges::size(data), dtype_of<T>(), root, options);
  }
  // output.size() must be size() * input.size().
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
  void all_gather(const In& input, Out&& output, OpOptions options = {}) {
    using T = std::ranges::range_value_t<In>;
    static_assert(std::is_same_v<T, std::ranges::range_value_t<Out>>,
                  "input and output element types differ");
    check_sizes("all_gather", std::ranges::size(input), std::ranges::size(output));
    all_gather(std::ranges::data(input), std::ranges::data(output), std::ranges::size(input), dtype_of<T>(),
               options);
  }
  // input.size() must be size() * output.size().
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
  void reduce_scatter(const In& input, Out&& output, ReduceOp op = ReduceOp::kSum, OpOptions options = {}) {
    using T = std::ranges::range_value_t<In>;
    static_assert(std::is_same_v<T, std::ranges::range_value_t<Out>>,
                  "input and output element types differ");
    check_sizes("reduce_scatter", std::ranges::size(output), std::ranges::size(input));
    reduce_scatter(std::ranges::data(input), std::ranges::data(output), std::ranges::size(output),
                   dtype_of<T>(), op, options);
  }

  class Impl;

 private:
  friend detail::Backend& detail::backend_of(ProcessGroup&);
  friend class ElasticGroup;
  // ElasticGroup's: a group whose failed Work passes its error through
  // `hooks` before wait() throws it (src/work_state.hpp), and whose Gloo
  // connections each come up within `connect_timeout` (0: options.timeout,
  // which Gloo stretches five times) or fail the constructor.
  ProcessGroup(std::shared_ptr<store::Store> store, std::string key_prefix, int rank, int world_size,
               ProcessGroupOptions options, std::shared_ptr<const detail::WorkHooks> hooks,
               std::chrono::milliseconds connect_timeout = {});
  // Aborts the backend and hands it over for destruction (which closes its
  // connections; null when it had to be kept); calls fail until the group is
  // assigned a new one.
  std::unique_ptr<detail::Backend> drop_backend();
  // Throws ddp::ConfigError unless big == size() * small.
  void check_sizes(std::string_view op, std::size_t small, std::size_t big) const;
  Work all_reduce_impl(void* data, std::size_t count, DataType type, ReduceOp op, OpOptions options,
                       bool sync);
  Work broadcast_impl(void* data, std::size_t count, DataType type, int root, OpOptions options, bool sync);
  Work all_gather_impl(const void* input, void* output, std::size_t count, DataType type, OpOptions options,
                       bool sync);
  Work reduce_scatter_impl(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                           OpOptions options, bool sync);
  std::unique_ptr<Impl> impl_;
};

// The backend "auto" resolves to on this machine.
std::string default_backend();
// Whether the SDK was built with the NCCL backend.
bool nccl_available();

}  // namespace ddp
