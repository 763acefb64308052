// Gloo backend: CPU collectives over Gloo's TCP transport, one op thread per group.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "gloo/gloo_address.hpp"
#include "gloo/gloo_loop_waker.hpp"
#include "gloo/gloo_store.hpp"
#include "op_queue.hpp"
#include "reduce_kernels.hpp"

namespace ddp::detail {
namespace {

// All-reduces up to this size take Gloo's bcube, larger ones its ring, which
// pipelines the reduction with the transfers and needs only two segments of
// scratch (bcube allocates the whole message's).
constexpr std::size_t kBcubeMaxBytes = std::size_t{1} << 20;

bool use_bcube(std::size_t bytes) { return bytes <= kBcubeMaxBytes; }

bool mentions_timeout(const std::string& what) {
  return what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos ||
         what.find("timeout") != std::string::npos;
}

// A group's Gloo context, which can also set the timeout of the waits that
// name none: those of Gloo's bcube all-reduce, which take the timeout its
// connections were made with. Only the thread running the group's operation
// waits (the op thread, or a caller running one inline; never two at once:
// OpQueue orders them), so only it sets it.
class MeshContext final : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;
  void set_wait_timeout(std::chrono::milliseconds timeout) {
    if (transportContext_ && transportContext_->getTimeout() != timeout)
      transportContext_->setTimeout(timeout);
  }
};

// Thread-safety: the constructor runs on the caller's thread; every collective
// runs on queue_'s thread, the only one touching mesh_.context afterwards.
class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(const BackendConfig& config)
      : rank_(config.rank),
        size_(config.size),
        group_(config.options.name),
        queue_(config.rank, config.hooks) {
    if (size_ > 1) connect(config);
  }

  std::string_view name() const override { return "gloo"; }

  Work all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Millis timeout,
                  bool sync) override {
    return queue_.submit(
        "all_reduce",
        [=, this] {
          dispatch_type(type, [&]<typename T>(std::type_identity<T>) {
            T* typed = static_cast<T*>(data);
            if (size_ > 1) gloo_allreduce("all_reduce", typed, count, op, timeout);
            if (op == ReduceOp::kAvg) divide_elements(typed, count, size_);
          });
        },
        sync);
  }

  Work broadcast(void* data, std::size_t count, DataType type, int root, Millis timeout, bool sync) override {
    const std::size_t bytes = count * element_size(type);
    return queue_.submit(
        "broadcast",
        [=, this] {
          if (size_ == 1) return;
          auto* ptr = static_cast<std::uint8_t*>(data);
          gloo::BroadcastOptions opts(mesh_.context);
          if (rank_ == root) opts.setInput(ptr, bytes);
          opts.setOutput(ptr, bytes);
          opts.setRoot(root);
          opts.setTag(next_tag());
          opts.setTimeout(timeout);
          guarded("broadcast", timeout, [&] { gloo::broadcast(opts); });
        },
        sync);
  }

  Work all_gather(const void* input, void* output, std::size_t count, DataType type, Millis timeout,
                  bool sync) override {
    const std::size_t bytes = count * element_size(type);
    return queue_.submit(
        "all_gather",
        [=, this] {
          auto* out = static_cast<std::uint8_t*>(output);
          if (size_ == 1) {
            std::memmove(out, input, bytes);
            return;
          }
          gloo::AllgatherOptions opts(mesh_.context);
          // Gloo's allgather reads `input` through its own buffer, so the const_cast
          // never leads to a write.
          opts.setInput(static_cast<std::uint8_t*>(const_cast<void*>(input)), bytes);
          opts.setOutput(out, bytes * static_cast<std::size_t>(size_));
          opts.setTag(next_tag());
          opts.setTimeout(timeout);
          guarded("all_gather", timeout, [&] { gloo::allgather(opts); });
        },
        sync);
  }

  // Gloo 0.5 has no new-style reduce-scatter: all-reduce the whole input in a
  // scratch buffer and keep our chunk (what torch's ProcessGroupGloo does for
  // CPU tensors). Costs 2x the bytes of a ring reduce-scatter.
  Work reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                      Millis timeout, bool sync) override {
    return queue_.submit(
        "reduce_scatter",
        [=, this] {
          dispatch_type(type, [&]<typename T>(std::type_identity<T>) {
            const std::size_t total = count * static_cast<std::size_t>(size_);
            std::vector<T> scratch(static_cast<const T*>(input), static_cast<const T*>(input) + total);
            if (size_ > 1) gloo_allreduce("reduce_scatter", scratch.data(), total, op, timeout);
            T* out = static_cast<T*>(output);
            std::memcpy(out, scratch.data() + count * static_cast<std::size_t>(rank_), count * sizeof(T));
            if (op == ReduceOp::kAvg) divide_elements(out, count, size_);
          });
        },
        sync);
  }

  // With nothing running, destruction closes the connections (peers blocked
  // on this rank then fail at once). With an operation still running, close
  // them now (each close waits for a tick of Gloo's event loop, kept short by
  // the waker), so that the peers fail and nothing more lands in the
  // operation's buffers. That operation is not woken by it when it waits for
  // a send (Gloo signals a closed pair to pending receives only);
  // ProcessGroup then keeps the backend alive until the process exits.
  void abort() override {
    if (mesh_.context && !queue_.wait_idle(Millis(0))) {
      const GlooLoopWaker::Awake awake(mesh_.waker.get());
      mesh_.context->closeConnections();
    }
  }
  bool wait_idle(Millis timeout) override { return queue_.wait_idle(timeout); }

  Work barrier(Millis timeout, bool sync) override {
    return queue_.submit(
        "barrier",
        [=, this] {
          if (size_ == 1) return;
          gloo::BarrierOptions opts(mesh_.context);
          opts.setTag(next_tag());
          opts.setTimeout(timeout);
          guarded("barrier", timeout, [&] { gloo::barrier(opts); });
        },
        sync);
  }

 private:
  void connect(const BackendConfig& config) {
    const GlooAddress address = choose_gloo_address(config.options.interface);
    const std::string where =
        address.iface.empty() ? "address " + address.hostname : "interface " + address.iface;
    log::get("sdk")->debug("gloo transport rank={} bind={} reason=\"{}\"", rank_, where, address.reason);
    gloo::transport::tcp::attr attr;
    if (!address.iface.empty())
      attr.iface = address.iface;
    else
      attr.hostname = address.hostname;
    try {
      mesh_.device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw NetworkError("rank " + std::to_string(rank_) + ": cannot bind the gloo transport to " + where +
                         " (" + address.reason + "): " + e.what() +
                         "; set DDP_GLOO_IFNAME to an interface the other ranks can reach");
    }
    mesh_.waker = std::make_unique<GlooLoopWaker>(mesh_.device);
    mesh_.context = std::make_shared<MeshContext>(rank_, size_);
    // Gloo waits up to five times its context's timeout for each connection
    // (tcp::Pair::waitUntil): a bounded connect sets a fifth of its bound for
    // the connect only. The connections keep it, but none waits on it after.
    const auto timeout = config.options.timeout;
    const auto bound = config.connect_timeout;
    mesh_.context->setTimeout(
        bound.count() > 0 && bound < timeout ? std::max(std::chrono::milliseconds(1), bound / 5) : timeout);
    GlooStore store(config.store, config.key_prefix + "gloo/", timeout);
    try {
      const GlooLoopWaker::Awake awake(mesh_.waker.get());
      mesh_.context->connectFullMesh(store, mesh_.device);
      mesh_.context->setTimeout(timeout);
      mesh_.context->set_wait_timeout(timeout);
    } catch (const ddp::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw NetworkError(
          "rank " + std::to_string(rank_) + " of group '" + group_ +
          "': gloo could not connect to its peers from " + where + ": " + e.what() +
          "; if the ranks run on several hosts, set DDP_GLOO_IFNAME to an interface they can reach");
    }
  }

  std::uint32_t next_tag() { return tag_++; }

  // gloo::allreduce of `count` elements at `data`, in place. A small message
  // takes Gloo's bcube (recursive halving and doubling: 2 log2(n) messages
  // per rank on n = 2^k ranks, 4 on 4) instead of its ring (4(n-1), 12 on 4,
  // however small the message): each message costs both sides a handshake on
  // Gloo's event loop, and that, not the bytes, is a small all-reduce's cost
  // (docs/performance.md, "Worker SDK: CPU per step"). The choice
  // depends only on the size and the group, so every rank makes the same.
  template <typename T>
  void gloo_allreduce(const char* what, T* data, std::size_t count, ReduceOp op, Millis timeout) {
    gloo::AllreduceOptions opts(mesh_.context);
    opts.setOutput(data, count);
    opts.setReduceFunction(reduce_function<T>(op));
    opts.setTag(next_tag());
    opts.setTimeout(timeout);
    if (use_bcube(count * sizeof(T))) {
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      // bcube's waits take no timeout of their own: they use the connections'.
      mesh_.context->set_wait_timeout(timeout);
    }
    guarded(what, timeout, [&] { gloo::allreduce(opts); });
  }

  template <typename F>
  void guarded(const char* op, Millis timeout, F&& f) {
    try {
      f();
    } catch (const gloo::IoException& e) {
      const std::string what = e.what();
      if (mentions_timeout(what)) {
        throw TimeoutError(std::string(op) + " timed out after " + std::to_string(timeout.count()) +
                           " ms on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                           " (group '" + group_ + "'): a peer did not arrive or is stuck; gloo: " + what);
      }
      throw BackendError(std::string(op) + " failed on rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_) + " (group '" + group_ + "'): lost a peer; gloo: " + what);
    } catch (const std::exception& e) {
      throw BackendError(std::string(op) + " failed on rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_) + " (group '" + group_ + "'): gloo: " + e.what());
    }
  }

  const int rank_;
  const int size_;
  const std::string group_;
  // The transport device, the group's connections, and the waker of the
  // device's event loop (gloo_loop_waker.hpp), which outlives the loop: it
  // keeps the loop awake while the connections close and the loop ends.
  struct Mesh {
    std::unique_ptr<GlooLoopWaker> waker;
    std::shared_ptr<gloo::transport::Device> device;
    std::shared_ptr<MeshContext> context;
    Mesh() = default;
    Mesh(const Mesh&) = delete;
    Mesh& operator=(const Mesh&) = delete;
    ~Mesh() {
      const GlooLoopWaker::Awake awake(waker.get());
      context.reset();
      device.reset();
    }
  };
  Mesh mesh_;
  std::uint32_t tag_ = 0;
  OpQueue queue_;  // last: its thread stops before the context goes away
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const BackendConfig& config) {
  return std::make_unique<GlooBackend>(config);
}

}  // namespace ddp::detail
