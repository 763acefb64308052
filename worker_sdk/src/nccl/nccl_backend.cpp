// NCCL backend: GPU collectives on one stream per group, completed by a
// watchdog thread that also enforces per-operation deadlines and aborts the
// communicator on timeout or asynchronous error (like torch's NCCL watchdog).
// NCCL and the CUDA runtime are loaded when the first group is created
// (nccl_api.hpp); every call goes through their tables.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"
#include "nccl/nccl_api.hpp"
#include "nccl/nccl_bootstrap.hpp"
#include "work_state.hpp"

namespace ddp {

bool nccl_available() { return true; }

namespace detail {

// For backend "auto": loads the CUDA runtime if it can (never NCCL).
bool cuda_device_present() {
  const CudaApi* cuda = try_load_cuda();
  int count = 0;
  return cuda != nullptr && cuda->cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

namespace {

ncclDataType_t to_nccl(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      break;
  }
  return ncclUint8;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Thread-safety: enqueue() serialises callers with mu_; the watchdog owns
// completion. After an abort every call fails with the first error.
class NcclBackend final : public Backend {
 public:
  // The libraries load first: NCCL (missing or older than 2.14 fails here,
  // GPU or not), then the CUDA runtime, then the device check — so with both
  // libraries present and no GPU the error names the device.
  explicit NcclBackend(const BackendConfig& config)
      : nccl_(load_nccl(rank_text(config))),
        cuda_(load_cuda(rank_text(config))),
        rank_(config.rank),
        size_(config.size),
        group_(config.options.name),
        hooks_(config.hooks) {
    // One deadline for the whole bring-up: the store exchanges and NCCL's own
    // init share the group's timeout instead of each getting all of it.
    const auto started = std::chrono::steady_clock::now();
    const Deadline deadline = Deadline::after(config.options.timeout);
    device_ = select_device(cuda_, config);
    check_one_rank_per_gpu(cuda_, config, device_, deadline);
    const auto checked = std::chrono::steady_clock::now();
    InitPlan plan;
    plan.ids = unique_id_count(size_, nccl_.scalable_init(), ranks_per_root());
    plan.timeout = config.options.timeout;
    InitTimings timings;
    comm_ = init_communicator(nccl_, config, deadline, plan, timings);
    log::get("sdk")->debug(
        "nccl communicator ready group={} rank={} size={} device={} nccl={} nccl_library={} cuda_runtime={} "
        "unique_ids={} gpu_check_ms={} id_exchange_ms={} nccl_init_ms={} total_ms={}",
        group_, rank_, size_, device_, nccl_version_text(nccl_.version), nccl_.library,
        cuda_version_text(cuda_.runtime_version), plan.ids,
        std::chrono::duration_cast<Millis>(checked - started).count(), timings.id_exchange.count(),
        timings.nccl_init.count(),
        std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - started).count());
    check_cuda(cuda_.cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cuda_.cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cuda_.cudaMalloc(&barrier_buffer_, sizeof(float)), "cudaMalloc");
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclBackend() override {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return pending_.empty(); });  // each op is bounded by its deadline
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    if (!aborted_) nccl_.ncclCommDestroy(comm_);
    for (cudaEvent_t e : spare_events_) cuda_.cudaEventDestroy(e);
    cuda_.cudaEventDestroy(order_event_);
    cuda_.cudaFree(barrier_buffer_);
    cuda_.cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "nccl"; }

  // ElasticGroup::reform: ncclCommAbort, so pending ops fail (the watchdog
  // completes them) and the destructor skips ncclCommDestroy, which would wait
  // for peers that may be gone. NCCL >= 2.27 could ncclCommShrink the old
  // communicator instead; re-initialising is simpler and works with every
  // version the SDK loads.
  void abort() override {
    {
      std::lock_guard lock(mu_);
      fail_locked("the process group is being re-formed on " + who());
    }
    cv_.notify_all();
  }

  Work all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Millis timeout,
                  bool sync) override {
    return enqueue("all_reduce", timeout, sync, [&] {
      return nccl_.ncclAllReduce(data, data, count, to_nccl(type), to_nccl(op), comm_, stream_);
    });
  }
  Work broadcast(void* data, std::size_t count, DataType type, int root, Millis timeout, bool sync) override {
    return enqueue("broadcast", timeout, sync, [&] {
      return nccl_.ncclBroadcast(data, data, count, to_nccl(type), root, comm_, stream_);
    });
  }
  Work all_gather(const void* input, void* output, std::size_t count, DataType type, Millis timeout,
                  bool sync) override {
    return enqueue("all_gather", timeout, sync,
                   [&] { return nccl_.ncclAllGather(input, output, count, to_nccl(type), comm_, stream_); });
  }
  Work reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                      Millis timeout, bool sync) override {
    return enqueue("reduce_scatter", timeout, sync, [&] {
      return nccl_.ncclReduceScatter(input, output, count, to_nccl(type), to_nccl(op), comm_, stream_);
    });
  }
  // NCCL has no barrier: a one-element all-reduce is one (what torch does).
  Work barrier(Millis timeout, bool sync) override {
    return enqueue("barrier", timeout, sync, [&] {
      return nccl_.ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

  bool device_buffers() const override { return true; }
  void* device_alloc(std::size_t bytes) override {
    void* p = nullptr;
    cuda_.cudaSetDevice(device_);
    check_cuda(cuda_.cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void device_free(void* p) noexcept override {
    cuda_.cudaSetDevice(device_);
    cuda_.cudaFree(p);
  }
  void device_copy(void* dst, const void* src, std::size_t bytes) override {
    std::lock_guard lock(mu_);
    cuda_.cudaSetDevice(device_);
    after_default_stream_locked();
    check_cuda(cuda_.cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  }
  void device_synchronize() override {
    cuda_.cudaSetDevice(device_);
    check_cuda(cuda_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  struct Pending {
    cudaEvent_t event;
    std::shared_ptr<Work::State> state;
    Deadline deadline;
    Millis timeout;
  };

  // DDP_NCCL_RANKS_PER_ROOT: ranks per ncclUniqueId with NCCL >= 2.23 (0: always
  // one id). 128 is torch's default (TORCH_NCCL_RANKS_PER_ROOT).
  static int ranks_per_root() {
    const char* v = std::getenv("DDP_NCCL_RANKS_PER_ROOT");
    if (v == nullptr || *v == '\0') return 128;
    return parse_int_or_throw<int>(v, "DDP_NCCL_RANKS_PER_ROOT", "a number of ranks >= 0", 0);
  }

  std::string who() const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (group '" + group_ + "')";
  }

  void check_cuda(cudaError_t err, const char* what) const {
    if (err != cudaSuccess) {
      throw BackendError(std::string(what) + " failed on " + who() + ": " + cuda_.cudaGetErrorString(err));
    }
  }

  // The group's stream waits for what the program already queued on the
  // legacy default stream (its kernels and cudaMemcpy, unless it uses streams
  // of its own), as torch's NCCL stream waits on the current stream.
  void after_default_stream_locked() {
    check_cuda(cuda_.cudaEventRecord(order_event_, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cuda_.cudaStreamWaitEvent(stream_, order_event_, 0), "cudaStreamWaitEvent");
  }

  cudaEvent_t take_event_locked() {
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    check_cuda(cuda_.cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }

  // `sync`: the caller waits at once. With nothing else in flight the op is
  // then completed on the calling thread, saving two thread hand-offs (to
  // the watchdog and back); otherwise the watchdog completes ops in order.
  template <typename F>
  Work enqueue(const char* op, Millis timeout, bool sync, F&& launch) {
    auto state = std::make_shared<Work::State>();
    state->op = op;
    state->rank = rank_;
    state->hooks = hooks_;
    std::unique_lock lock(mu_);
    if (!failure_.empty()) {
      state->complete(std::make_exception_ptr(
          BackendError(std::string(op) + " on " + who() +
                       ": the NCCL communicator was aborted after an earlier failure: " + failure_)));
      return Work(state);
    }
    cuda_.cudaSetDevice(device_);
    after_default_stream_locked();
    // A non-blocking communicator may answer ncclInProgress while it enqueues.
    ncclResult_t r = launch();
    while (r == ncclInProgress) nccl_.ncclCommGetAsyncError(comm_, &r);
    if (r != ncclSuccess) {
      fail_locked(std::string(op) + " failed on " + who() + ": " + nccl_error_text(nccl_, r));
      state->complete(std::make_exception_ptr(BackendError(failure_)));
      return Work(state);
    }
    Pending pending{take_event_locked(), state, Deadline::after(timeout), timeout};
    check_cuda(cuda_.cudaEventRecord(pending.event, stream_), "cudaEventRecord");
    if (sync && pending_.empty()) {
      for (;;) {
        if (auto outcome = poll_locked(pending)) {
          spare_events_.push_back(pending.event);
          lock.unlock();
          state->complete(*outcome);
          return Work(state);
        }
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
    }
    pending_.push_back(pending);
    lock.unlock();
    cv_.notify_all();
    return Work(state);
  }

  // Whether `p` has finished: nullopt while it runs, else its outcome (null:
  // success). An asynchronous NCCL error or the op's deadline aborts the
  // communicator. Called with mu_ held.
  std::optional<std::exception_ptr> poll_locked(const Pending& p) {
    const cudaError_t q = cuda_.cudaEventQuery(p.event);
    if (q == cudaSuccess) return std::exception_ptr{};
    ncclResult_t async = ncclSuccess;
    if (!aborted_) nccl_.ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      fail_locked(std::string(p.state->op) + " failed on " + who() + ": " + nccl_error_text(nccl_, async));
      return std::make_exception_ptr(BackendError(failure_));
    }
    if (aborted_) {
      return std::make_exception_ptr(BackendError(std::string(p.state->op) + " on " + who() +
                                                  ": the NCCL communicator was aborted: " + failure_));
    }
    if (p.deadline.expired()) {
      fail_locked(std::string(p.state->op) + " timed out after " + std::to_string(p.timeout.count()) +
                  " ms on " + who() +
                  ": a peer did not arrive or is stuck; the NCCL communicator was aborted");
      return std::make_exception_ptr(TimeoutError(failure_));
    }
    return std::nullopt;
  }

  void fail_locked(const std::string& reason) {
    if (failure_.empty()) failure_ = reason;
    if (!aborted_) {
      nccl_.ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

  // Completes operations in order; spins with yields while work is pending so
  // completion latency stays in microseconds, sleeps on the condvar otherwise.
  void watch() {
    cuda_.cudaSetDevice(device_);
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      Pending& head = pending_.front();
      auto outcome = poll_locked(head);
      if (!outcome) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        continue;
      }
      spare_events_.push_back(head.event);
      auto state = head.state;
      pending_.pop_front();
      state->complete(*outcome);
      cv_.notify_all();
    }
  }

  const NcclApi& nccl_;
  const CudaApi& cuda_;
  const int rank_;
  const int size_;
  const std::string group_;
  const std::shared_ptr<const WorkHooks> hooks_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_buffer_ = nullptr;
  cudaEvent_t order_event_ = nullptr;      // orders stream_ after the legacy default stream
  std::vector<cudaEvent_t> spare_events_;  // completed ops' events, for reuse
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::string failure_;
  bool aborted_ = false;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const BackendConfig& config) {
  return std::make_unique<NcclBackend>(config);
}

}  // namespace detail
}  // namespace ddp
