// ddp_sdk_test_worker: one rank of an SDK integration test, configured by env
// like any worker (RANK, WORLD_SIZE, DDP_STORE_ENDPOINT, ...). argv[1] picks the
// scenario; results go to stdout, one line per finding.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/sdk.hpp"
#include "ddp/store/store.hpp"

namespace {

using ddp::DataType;
using ddp::ReduceOp;

// Small integers: every sum over <= 4 ranks is exact in all types, bf16 included.
int value(int rank, std::size_t i) { return static_cast<int>(((rank + 1) * (i % 7 + 1) + i % 5) % 13 + 1); }

template <typename T>
T make(double v) {
  if constexpr (std::is_same_v<T, ddp::Half> || std::is_same_v<T, ddp::BFloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <typename T>
double widen(T v) {
  if constexpr (std::is_same_v<T, ddp::Half> || std::is_same_v<T, ddp::BFloat16>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}

int g_checks = 0;

template <typename T>
void expect_equal(const char* op, const std::vector<T>& got, const std::vector<T>& want,
                  const std::string& what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    ++g_checks;
    if (widen(got[i]) != widen(want[i])) {
      throw std::runtime_error(std::string("mismatch: ") + op + " " + what + " index " + std::to_string(i) +
                               " got " + std::to_string(widen(got[i])) + " want " +
                               std::to_string(widen(want[i])));
    }
  }
}

template <typename T>
T avg_of(double sum, int size) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<T>(sum) / static_cast<T>(size));
  else if constexpr (std::is_same_v<T, double>)
    return sum / size;
  // float and the 16-bit types divide in float, as the backend does.
  else
    return make<T>(static_cast<float>(widen(make<T>(sum))) / static_cast<float>(size));
}

template <typename T>
void check_type(ddp::ProcessGroup& pg, const char* type_name) {
  const int rank = pg.rank(), size = pg.size();
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4097}}) {
    const std::string what = std::string(type_name) + " n=" + std::to_string(n);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<T> buf(n), want(n);
      for (std::size_t i = 0; i < n; ++i) {
        buf[i] = make<T>(value(rank, i));
        double sum = 0, lo = 1e9, hi = -1e9;
        for (int r = 0; r < size; ++r) {
          sum += value(r, i);
          lo = std::min<double>(lo, value(r, i));
          hi = std::max<double>(hi, value(r, i));
        }
        want[i] = op == ReduceOp::kSum   ? make<T>(sum)
                  : op == ReduceOp::kMin ? make<T>(lo)
                  : op == ReduceOp::kMax ? make<T>(hi)
                                         : avg_of<T>(sum, size);
      }
      pg.all_reduce(buf, op);
      expect_equal("all_reduce", buf, want, what + " op=" + std::string(ddp::to_string(op)));
    }
    {
      const int root = size - 1;
      std::vector<T> buf(n), want(n);
      for (std::size_t i = 0; i < n; ++i) {
        buf[i] = make<T>(rank == root ? value(root, i) : 0);
        want[i] = make<T>(value(root, i));
      }
      pg.broadcast(buf, root);
      expect_equal("broadcast", buf, want, what);
    }
    {
      std::vector<T> in(n), out(n * static_cast<std::size_t>(size)), want(out.size());
      for (std::size_t i = 0; i < n; ++i) in[i] = make<T>(value(rank, i));
      for (int r = 0; r < size; ++r)
        for (std::size_t i = 0; i < n; ++i) want[static_cast<std::size_t>(r) * n + i] = make<T>(value(r, i));
      pg.all_gather(in, out);
      expect_equal("all_gather", out, want, what);
    }
    {
      std::vector<T> in(n * static_cast<std::size_t>(size)), out(n), want(n);
      for (std::size_t j = 0; j < in.size(); ++j) in[j] = make<T>(value(rank, j));
      for (std::size_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int r = 0; r < size; ++r) sum += value(r, static_cast<std::size_t>(rank) * n + i);
        want[i] = make<T>(sum);
      }
      pg.reduce_scatter(in, out, ReduceOp::kSum);
      expect_equal("reduce_scatter", out, want, what);
    }
  }
}

int collectives(bool large) {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  options.timeout = std::chrono::seconds(60);
  ddp::ProcessGroup pg(ctx, options);
  check_type<float>(pg, "float32");
  check_type<double>(pg, "float64");
  check_type<ddp::Half>(pg, "float16");
  check_type<ddp::BFloat16>(pg, "bfloat16");
  check_type<std::int32_t>(pg, "int32");
  check_type<std::int64_t>(pg, "int64");
  check_type<std::uint8_t>(pg, "uint8");

  // Several async operations in flight, waited for out of order.
  std::vector<std::vector<float>> bufs(3, std::vector<float>(1000));
  std::vector<ddp::Work> works;
  for (std::size_t k = 0; k < bufs.size(); ++k) {
    for (std::size_t i = 0; i < 1000; ++i) bufs[k][i] = static_cast<float>(value(pg.rank(), i + k));
    works.push_back(pg.all_reduce_async(bufs[k], ReduceOp::kMax));
  }
  for (std::size_t k = bufs.size(); k-- > 0;) {
    works[k].wait();
    if (!works[k].is_completed() || works[k].exception())
      throw std::runtime_error("async work not completed");
    for (std::size_t i = 0; i < 1000; ++i) {
      double hi = 0;
      for (int r = 0; r < pg.size(); ++r) hi = std::max<double>(hi, value(r, i + k));
      ++g_checks;
      if (bufs[k][i] != static_cast<float>(hi)) throw std::runtime_error("mismatch: async all_reduce");
    }
  }
  pg.barrier();

  // Either side of the size where the backend switches from Gloo's bcube to
  // its ring (1 MiB): both algorithms, on every world size.
  for (std::size_t n : {std::size_t{1} << 18, (std::size_t{1} << 18) + 1}) {
    std::vector<float> buf(n), want(n);
    for (std::size_t i = 0; i < n; ++i) {
      buf[i] = static_cast<float>(value(pg.rank(), i));
      double sum = 0;
      for (int r = 0; r < pg.size(); ++r) sum += value(r, i);
      want[i] = static_cast<float>(sum);
    }
    pg.all_reduce(buf, ReduceOp::kSum);
    expect_equal("all_reduce", buf, want, "float32 n=" + std::to_string(n));
  }

  if (large) {  // 64 MiB of float32
    std::vector<float> big(16u << 20);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(value(pg.rank(), i));
    pg.all_reduce(big, ReduceOp::kSum);
    for (std::size_t i = 0; i < big.size(); ++i) {
      double sum = 0;
      for (int r = 0; r < pg.size(); ++r) sum += value(r, i);
      if (big[i] != static_cast<float>(sum))
        throw std::runtime_error("mismatch: 64 MiB all_reduce at " + std::to_string(i));
    }
    ++g_checks;
  }
  std::printf("ok rank %d: %d checks\n", ctx.rank, g_checks);
  return 0;
}

// Rank 0 calls all_reduce; the others join the group but never call it.
// `floats`: the all-reduce's size (1024 takes Gloo's bcube, over 1 MiB its ring).
int missing_peer(std::size_t floats) {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  ddp::ProcessGroup pg(ctx, options);
  if (ctx.rank != 0) {
    ctx.store->get(ctx.store_prefix + "released", std::chrono::seconds(60));
    return 0;
  }
  std::vector<float> buf(floats, 1.0f);
  ddp::OpOptions op;
  op.timeout = std::chrono::milliseconds(1000);
  try {
    pg.all_reduce(buf, ReduceOp::kSum, op);
    std::printf("all_reduce completed without its peers\n");
    return 1;
  } catch (const ddp::TimeoutError& e) {
    std::printf("caught TimeoutError: %s\n", e.what());
  }
  // A later collective fails at once instead of hanging.
  bool failed_fast = false;
  try {
    pg.barrier();
  } catch (const ddp::BackendError& e) {
    std::printf("then BackendError: %s\n", e.what());
    failed_fast = true;
  }
  ctx.store->set(ctx.store_prefix + "released", "1");
  return failed_fast ? 0 : 1;
}

int join_timeout() {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  options.timeout = std::chrono::milliseconds(1000);
  ddp::ProcessGroup pg(ctx, options);
  return 0;
}

// Timeouts past the clock's range, as a program may write "forever": the
// group's, one collective's and a wait's.
int far_timeouts() {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  options.timeout = std::chrono::milliseconds::max();
  ddp::ProcessGroup pg(ctx, options);
  std::vector<float> v{1.0f};
  ddp::OpOptions op;
  op.timeout = std::chrono::milliseconds(1'000'000'000'000'000);  // 1e12 s
  pg.all_reduce_async(v, ReduceOp::kSum, op).wait(std::chrono::milliseconds(1'000'000'000'000'000));
  pg.barrier();
  std::printf("far timeouts ok rank %d sum %d\n", ctx.rank, static_cast<int>(v[0]));
  return static_cast<int>(v[0]) == ctx.world_size ? 0 : 1;
}

// The world this rank joined, checked by an all_reduce of rank + 1; for jobs
// started by a scheduler.
int world() {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  ddp::ProcessGroup pg(ctx, options);
  std::vector<float> v{static_cast<float>(ctx.rank + 1)};
  pg.all_reduce(v, ReduceOp::kSum);
  const int want = ctx.world_size * (ctx.world_size + 1) / 2;
  std::printf("world rank=%d world_size=%d local_rank=%d local_world_size=%d group_rank=%d sum=%d %s\n",
              ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size, ctx.group_rank,
              static_cast<int>(v[0]), static_cast<int>(v[0]) == want ? "ok" : "WRONG");
  pg.barrier();
  return static_cast<int>(v[0]) == want ? 0 : 1;
}

int scenario(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "collectives") return collectives(argc > 2 && std::strcmp(argv[2], "--large") == 0);
  if (mode == "missing-peer") {
    const bool ring = argc > 2 && std::strcmp(argv[2], "--ring") == 0;
    return missing_peer(ring ? (std::size_t{1} << 18) + 1 : 1024);
  }
  if (mode == "join-timeout") return join_timeout();
  if (mode == "world") return world();
  if (mode == "far-timeouts") return far_timeouts();
  if (mode == "throw") throw std::runtime_error("boom from the test worker");
  if (mode == "config") throw ddp::ConfigError("--flag is wrong");
  if (mode == "segv") {
    volatile int* p = nullptr;
    *p = 1;
  }
  if (mode == "abort") std::abort();
  std::fprintf(stderr,
               "usage: ddp_sdk_test_worker collectives "
               "[--large]|missing-peer [--ring]|join-timeout|world|throw|config|segv|abort\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) { return ddp::run(argc, argv, scenario); }
