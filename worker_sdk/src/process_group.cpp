#include "ddp/process_group.hpp"

#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>

#include "backend.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/time_bounds.hpp"
#include "ddp/init.hpp"
#include "ddp/store/store.hpp"
#include "liveness_collectives.hpp"
#include "work_state.hpp"

namespace ddp {

class ProcessGroup::Impl {
 public:
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{};
  std::unique_ptr<detail::Backend> backend;

  // The backend, or a clear error between ElasticGroup::reform() dropping it and the next one.
  detail::Backend& get() const {
    if (!backend) {
      throw BackendError("process group on rank " + std::to_string(rank) +
                         " has no connections: it is being re-formed (ElasticGroup::reform)");
    }
    return *backend;
  }

  std::chrono::milliseconds resolve(const OpOptions& options) const {
    return options.timeout.count() > 0 ? clamp_duration(options.timeout) : timeout;
  }

  // Runs `issue` (a backend call returning the collective's Work), numbered
  // in the worker's liveness file when this group spans the job.
  template <typename Issue>
  Work counted(liveness::CollectiveKind kind, Issue&& issue) const {
    if (!published) return issue();
    const std::uint64_t seq = detail::collective_issued(kind);
    try {
      return detail::WorkAccess::track(issue(), seq);
    } catch (...) {
      detail::collective_completed(seq);  // never started: nobody waits in it
      throw;
    }
  }
  bool published = false;  // its collectives are counted (liveness_collectives.hpp)
};

namespace detail {

void* Backend::device_alloc(std::size_t) {
  throw BackendError("backend '" + std::string(name()) + "' has no device memory");
}
void Backend::device_free(void*) noexcept {}
void Backend::device_copy(void*, const void*, std::size_t) {
  throw BackendError("backend '" + std::string(name()) + "' has no device memory");
}
void Backend::device_synchronize() {}

Backend& backend_of(ProcessGroup& group) { return group.impl_->get(); }

}  // namespace detail

namespace {

// The n-th group called `name` that rank `rank` creates under `prefix`. Every
// rank creates its groups in the same order, so the numbers agree without
// talking; counting per rank also lets threads of one process act as ranks.
int next_instance(const std::string& prefix, const std::string& name, int rank) {
  static std::mutex mu;
  static std::map<std::string, int> counters;
  std::lock_guard lock(mu);
  return counters[prefix + '\n' + name + '\n' + std::to_string(rank)]++;
}

std::string resolve_backend(const std::string& requested) {
  if (requested == "auto" || requested.empty()) return default_backend();
  if (requested == "gloo" || requested == "nccl") return requested;
  throw ConfigError("unknown process group backend '" + requested + "': use gloo, nccl or auto");
}

void require(bool ok, const char* what) {
  if (!ok) throw ConfigError(what);
}

}  // namespace

std::string default_backend() { return nccl_available() && detail::cuda_device_present() ? "nccl" : "gloo"; }

ProcessGroup::ProcessGroup(std::shared_ptr<store::Store> store, std::string key_prefix, int rank,
                           int world_size, ProcessGroupOptions options)
    : ProcessGroup(std::move(store), std::move(key_prefix), rank, world_size, std::move(options), nullptr) {}

ProcessGroup::ProcessGroup(std::shared_ptr<store::Store> store, std::string key_prefix, int rank,
                           int world_size, ProcessGroupOptions options,
                           std::shared_ptr<const detail::WorkHooks> hooks,
                           std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>()) {
  if (!store) throw ConfigError("ProcessGroup: no store given (call ddp::init() first)");
  if (world_size < 1)
    throw ConfigError("ProcessGroup: world size must be >= 1, got " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size) {
    throw ConfigError("ProcessGroup: rank " + std::to_string(rank) + " is out of range for world size " +
                      std::to_string(world_size));
  }
  if (options.timeout.count() <= 0) throw ConfigError("ProcessGroupOptions::timeout must be positive");
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    throw ConfigError("ProcessGroupOptions::name must be non-empty and contain no '/': '" + options.name +
                      "'");
  }
  options.backend = resolve_backend(options.backend);
  // Gloo and NCCL add it to now unchecked: milliseconds::max() ("forever")
  // timed out at once. kMaxDuration (about 34 years) is as good as forever.
  options.timeout = clamp_duration(options.timeout);
  impl_->rank = rank;
  impl_->size = world_size;
  impl_->timeout = options.timeout;
  impl_->published = detail::publish_collectives(world_size);

  detail::BackendConfig config;
  config.store = std::move(store);
  config.key_prefix = key_prefix + "pg/" + options.name + "/" +
                      std::to_string(next_instance(key_prefix, options.name, rank)) + "/";
  config.rank = rank;
  config.size = world_size;
  config.options = options;
  config.hooks = std::move(hooks);
  config.connect_timeout = connect_timeout;
  detail::join_group(*config.store, config.key_prefix, rank, world_size, options.timeout,
                     "process group '" + options.name + "' (" + options.backend + ")");
  impl_->backend =
      options.backend == "nccl" ? detail::make_nccl_backend(config) : detail::make_gloo_backend(config);
  log::get("sdk")->info("process group ready name={} backend={} rank={} size={}", options.name,
                        options.backend, rank, world_size);
}

ProcessGroup::ProcessGroup(const Context& context, ProcessGroupOptions options)
    : ProcessGroup(context.store, context.store_prefix, context.rank, context.world_size,
                   std::move(options)) {}

ProcessGroup::~ProcessGroup() {
  // Destroyed by an exception unwinding (the usual way a worker fails): keep
  // the connections open until the process exits. Closing them now would make
  // the peers fail with "lost a peer" before this rank has written its error
  // file, and the launcher would blame the wrong rank. Also avoids blocking the
  // failing rank on a collective its peers will never finish.
  if (impl_ && std::uncaught_exceptions() > 0) {
    static std::mutex mu;
    static auto* kept = new std::vector<std::unique_ptr<Impl>>();  // never freed, on purpose
    std::lock_guard lock(mu);
    kept->push_back(std::move(impl_));
  }
}
ProcessGroup::ProcessGroup(ProcessGroup&&) noexcept = default;

std::unique_ptr<detail::Backend> ProcessGroup::drop_backend() {
  if (!impl_ || !impl_->backend) return nullptr;
  impl_->backend->abort();
  // An operation still blocked on a peer after the abort ends by its own
  // timeout; destroying its backend would wait that long. Keep it instead
  // (its connections are closed already), as the destructor does when unwinding.
  constexpr auto kGrace = std::chrono::milliseconds(500);
  if (!impl_->backend->wait_idle(kGrace)) {
    log::get("sdk")->warn(
        "process group on rank {}: an operation still runs {} ms after its connections were closed; leaving "
        "it "
        "to its timeout",
        impl_->rank, kGrace.count());
    static std::mutex mu;
    static auto* kept = new std::vector<std::unique_ptr<detail::Backend>>();  // never freed, on purpose
    std::lock_guard lock(mu);
    kept->push_back(std::move(impl_->backend));
    return nullptr;
  }
  return std::move(impl_->backend);
}

ProcessGroup& ProcessGroup::operator=(ProcessGroup&&) noexcept = default;

int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return impl_->size; }
std::string_view ProcessGroup::backend() const { return impl_->get().name(); }

Work ProcessGroup::all_reduce_impl(void* data, std::size_t count, DataType type, ReduceOp op,
                                   OpOptions options, bool sync) {
  if (count == 0) return Work();
  require(data != nullptr, "all_reduce: null buffer");
  return impl_->counted(liveness::CollectiveKind::kAllReduce, [&] {
    return impl_->get().all_reduce(data, count, type, op, impl_->resolve(options), sync);
  });
}

Work ProcessGroup::broadcast_impl(void* data, std::size_t count, DataType type, int root, OpOptions options,
                                  bool sync) {
  if (root < 0 || root >= impl_->size) {
    throw ConfigError("broadcast: root " + std::to_string(root) + " is out of range for group size " +
                      std::to_string(impl_->size));
  }
  if (count == 0) return Work();
  require(data != nullptr, "broadcast: null buffer");
  return impl_->counted(liveness::CollectiveKind::kBroadcast, [&] {
    return impl_->get().broadcast(data, count, type, root, impl_->resolve(options), sync);
  });
}

Work ProcessGroup::all_gather_impl(const void* input, void* output, std::size_t count, DataType type,
                                   OpOptions options, bool sync) {
  if (count == 0) return Work();
  require(input != nullptr && output != nullptr, "all_gather: null buffer");
  return impl_->counted(liveness::CollectiveKind::kAllGather, [&] {
    return impl_->get().all_gather(input, output, count, type, impl_->resolve(options), sync);
  });
}

Work ProcessGroup::reduce_scatter_impl(const void* input, void* output, std::size_t count, DataType type,
                                       ReduceOp op, OpOptions options, bool sync) {
  if (count == 0) return Work();
  require(input != nullptr && output != nullptr, "reduce_scatter: null buffer");
  return impl_->counted(liveness::CollectiveKind::kReduceScatter, [&] {
    return impl_->get().reduce_scatter(input, output, count, type, op, impl_->resolve(options), sync);
  });
}

Work ProcessGroup::all_reduce_async(void* data, std::size_t count, DataType type, ReduceOp op,
                                    OpOptions options) {
  return all_reduce_impl(data, count, type, op, options, false);
}
Work ProcessGroup::broadcast_async(void* data, std::size_t count, DataType type, int root,
                                   OpOptions options) {
  return broadcast_impl(data, count, type, root, options, false);
}
Work ProcessGroup::all_gather_async(const void* input, void* output, std::size_t count, DataType type,
                                    OpOptions options) {
  return all_gather_impl(input, output, count, type, options, false);
}
Work ProcessGroup::reduce_scatter_async(const void* input, void* output, std::size_t count, DataType type,
                                        ReduceOp op, OpOptions options) {
  return reduce_scatter_impl(input, output, count, type, op, options, false);
}
Work ProcessGroup::barrier_async(OpOptions options) {
  return impl_->counted(liveness::CollectiveKind::kBarrier,
                        [&] { return impl_->get().barrier(impl_->resolve(options), false); });
}

void ProcessGroup::all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, OpOptions options) {
  all_reduce_impl(data, count, type, op, options, true).wait();
}
void ProcessGroup::broadcast(void* data, std::size_t count, DataType type, int root, OpOptions options) {
  broadcast_impl(data, count, type, root, options, true).wait();
}
void ProcessGroup::all_gather(const void* input, void* output, std::size_t count, DataType type,
                              OpOptions options) {
  all_gather_impl(input, output, count, type, options, true).wait();
}
void ProcessGroup::reduce_scatter(const void* input, void* output, std::size_t count, DataType type,
                                  ReduceOp op, OpOptions options) {
  reduce_scatter_impl(input, output, count, type, op, options, true).wait();
}
void ProcessGroup::barrier(OpOptions options) {
  impl_
      ->counted(liveness::CollectiveKind::kBarrier,
                [&] { return impl_->get().barrier(impl_->resolve(options), true); })
      .wait();
}

void ProcessGroup::check_sizes(std::string_view op, std::size_t small, std::size_t big) const {
  if (big != small * static_cast<std::size_t>(impl_->size)) {
    throw ConfigError(std::string(op) + ": the larger buffer must hold group size (" +
                      std::to_string(impl_->size) + ") x " + std::to_string(small) + " elements, got " +
                      std::to_string(big));
  }
}

namespace detail {

void join_group(store::Store& store, const std::string& key_prefix, int rank, int size, Millis timeout,
                std::string_view what) {
  store.set(key_prefix + "join/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) keys.push_back(key_prefix + "join/" + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError&) {
    const auto values = store.multi_get(keys);
    std::string missing;
    int n_missing = 0;
    for (int r = 0; r < size; ++r) {
      if (values[static_cast<std::size_t>(r)]) continue;
      if (n_missing++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (n_missing > 16) missing += ", ...";
    throw TimeoutError(std::string(what) + " on rank " + std::to_string(rank) + ": timed out after " +
                       std::to_string(timeout.count()) + " ms waiting for " + std::to_string(n_missing) +
                       " rank(s) of " + std::to_string(size) + " to join (missing: " + missing +
                       "); check that every rank runs and uses the same store and DDP_STORE_PREFIX");
  }
}

}  // namespace detail
}  // namespace ddp
