// GPU tests of the NCCL backend, one scenario per ctest test (argv[1]). Exit
// 77 (ctest SKIP_RETURN_CODE) when no CUDA device is visible. One GPU is
// enough: NCCL refuses two ranks on one GPU, so multi-rank paths are tested
// through what must fail (init timeout, duplicate GPU) and a fake peer.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ddp/reducer.hpp"
#include "ddp/sdk.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/memory_store.hpp"

namespace {

using Clock = std::chrono::steady_clock;
int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(T));
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <typename T>
std::vector<T> host_copy(const T* d, std::size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

ddp::ProcessGroupOptions nccl_options(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  ddp::ProcessGroupOptions o;
  o.backend = "nccl";
  o.device = 0;
  o.timeout = timeout;
  return o;
}

int world_of_one() {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  ddp::ProcessGroup pg(store, "t/", 0, 1, nccl_options());
  expect(pg.backend() == "nccl", "backend is nccl");
  expect(store->try_get("t/pg/default/0/nccl/unique_id").value_or("").size() == sizeof(ncclUniqueId),
         "the ncclUniqueId went through the store under the communicator's key");
  for (std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{16} << 20}) {
    std::vector<float> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 13);
    float* d = device_copy(h);
    pg.all_reduce(d, n, ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
    expect(host_copy(d, n) == h, "all_reduce float32 n=" + std::to_string(n));
    pg.all_reduce(d, n, ddp::DataType::kFloat32, ddp::ReduceOp::kAvg);
    expect(host_copy(d, n) == h, "all_reduce avg float32 n=" + std::to_string(n));
    cudaFree(d);
  }
  std::vector<ddp::BFloat16> hb(1000, ddp::BFloat16(3.0f));
  auto* db = device_copy(hb);
  pg.all_reduce(db, hb.size(), ddp::DataType::kBFloat16, ddp::ReduceOp::kMax);
  expect(static_cast<float>(host_copy(db, hb.size())[999]) == 3.0f, "all_reduce max bfloat16");
  cudaFree(db);
  std::vector<std::int64_t> hi(10, 7), out(10);
  auto* di = device_copy(hi);
  auto* dout = device_copy(out);
  pg.all_gather(di, dout, 10, ddp::DataType::kInt64);
  pg.broadcast(di, 10, ddp::DataType::kInt64, 0);
  pg.reduce_scatter(di, dout, 10, ddp::DataType::kInt64, ddp::ReduceOp::kSum);
  pg.barrier();
  expect(host_copy(dout, 10) == hi, "all_gather, broadcast, reduce_scatter, barrier int64");
  cudaFree(di);
  cudaFree(dout);
  return g_failures ? 1 : 0;
}

// Rank 0 of 2; the test plays a rank 1 that joins the store but never NCCL.
int init_timeout() {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  store->set("t/pg/default/0/join/1", "1");
  store->set("t/pg/default/0/nccl/gpu/1", "other-host|0000:99:00.0");
  const auto start = Clock::now();
  try {
    ddp::ProcessGroup pg(store, "t/", 0, 2, nccl_options(std::chrono::seconds(3)));
    expect(false, "init without the peer should time out");
  } catch (const ddp::TimeoutError& e) {
    std::printf("message: %s\n", e.what());
    expect(contains(e.what(), "NCCL communicator init timed out after 3000 ms on rank 0 of 2"),
           "timeout names rank and op");
  }
  expect(Clock::now() - start < std::chrono::seconds(20), "abort returned promptly");
  return g_failures ? 1 : 0;
}

// Rank 1 of 2 whose rank 0 joined but never published the ncclUniqueId: the
// store wait and NCCL's init share one deadline, so the whole bring-up fails
// within about one timeout, not two.
int id_never_published() {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  store->set("t/pg/default/0/join/0", "1");
  store->set("t/pg/default/0/nccl/gpu/0", "other-host|0000:99:00.0");
  const auto start = Clock::now();
  try {
    ddp::ProcessGroup pg(store, "t/", 1, 2, nccl_options(std::chrono::seconds(3)));
    expect(false, "init without rank 0's unique id should time out");
  } catch (const ddp::TimeoutError& e) {
    std::printf("message: %s\n", e.what());
    expect(contains(e.what(), "nccl/unique_id"), "the timeout names the unique id key");
  }
  expect(Clock::now() - start < std::chrono::seconds(5), "one deadline for the whole init");
  return g_failures ? 1 : 0;
}

// DDP_NCCL_RANKS_PER_ROOT=1 on a world of 3: with NCCL >= 2.23 rank 0 creates
// id 0 of 3 under .../unique_id/0 and waits for the other two (which never
// come) until the deadline; older NCCL keeps the single id.
int scalable_ids() {
  setenv("DDP_NCCL_RANKS_PER_ROOT", "1", 1);
  auto store = std::make_shared<ddp::store::MemoryStore>();
  for (int r = 1; r < 3; ++r) {
    store->set("t/pg/default/0/join/" + std::to_string(r), "1");
    store->set("t/pg/default/0/nccl/gpu/" + std::to_string(r),
               "other-host|0000:9" + std::to_string(r) + ":00.0");
  }
  int version = 0;
  ncclGetVersion(&version);
  try {
    ddp::ProcessGroup pg(store, "t/", 0, 3, nccl_options(std::chrono::seconds(2)));
    expect(false, "init without peers should time out");
  } catch (const ddp::TimeoutError& e) {
    std::printf("message: %s\n", e.what());
  }
  const bool scalable = NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0) && version >= NCCL_VERSION(2, 23, 0);
  expect(store->try_get("t/pg/default/0/nccl/unique_id/0").has_value() == scalable,
         scalable ? "rank 0 published id 0 of 3 for ncclCommInitRankScalable" : "one id below NCCL 2.23");
  expect(store->try_get("t/pg/default/0/nccl/unique_id").has_value() == !scalable,
         "the single-id key only without it");
  unsetenv("DDP_NCCL_RANKS_PER_ROOT");
  return g_failures ? 1 : 0;
}

// Two ranks (threads) on GPU 0: both must refuse with the fix in the message.
int duplicate_gpu() {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  std::string messages[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        ddp::ProcessGroup pg(store, "t/", r, 2, nccl_options(std::chrono::seconds(20)));
      } catch (const ddp::ConfigError& e) {
        messages[r] = e.what();
      } catch (const std::exception& e) {
        messages[r] = std::string("wrong error type: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    std::printf("rank %d: %s\n", r, messages[r].c_str());
    expect(contains(messages[r], "ranks 0 and 1 both use GPU") && contains(messages[r], "--nproc_per_node") &&
               contains(messages[r], "CUDA_VISIBLE_DEVICES"),
           "rank " + std::to_string(r) + " names the fix");
  }
  int count = 0;
  cudaGetDeviceCount(&count);
  setenv("LOCAL_RANK", std::to_string(count).c_str(), 1);
  try {
    auto o = nccl_options();
    o.device = -1;
    ddp::ProcessGroup pg(std::make_shared<ddp::store::MemoryStore>(), "u/", 0, 1, o);
    expect(false, "LOCAL_RANK past the GPU count must fail");
  } catch (const ddp::ConfigError& e) {
    std::printf("message: %s\n", e.what());
    expect(contains(e.what(), "has no GPU of its own") && contains(e.what(), "--nproc_per_node"),
           "LOCAL_RANK beyond the visible GPUs names the fix");
  }
  return g_failures ? 1 : 0;
}

// The Reducer over device gradients: buckets on the GPU, copies in and out at
// the right offsets, and ordering after the program's own work on the legacy
// default stream (an async host-to-device copy not yet finished when the
// gradient is marked ready, and likewise before an out-of-place all_gather).
int reducer() {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  ddp::ProcessGroup pg(store, "t/", 0, 1, nccl_options());
  const std::vector<std::size_t> sizes{1000, 300000, 50, 8u << 20};  // the last one: 32 MiB, its own bucket
  std::vector<float*> device(sizes.size());
  std::vector<std::span<float>> grads;
  std::vector<float*> pinned(sizes.size());
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    cudaMalloc(reinterpret_cast<void**>(&device[p]), sizes[p] * sizeof(float));
    cudaMemset(device[p], 0, sizes[p] * sizeof(float));
    cudaMallocHost(reinterpret_cast<void**>(&pinned[p]), sizes[p] * sizeof(float));
    grads.emplace_back(device[p], sizes[p]);
  }
  ddp::Reducer reducer(pg, grads);
  expect(reducer.buckets().size() >= 2, "more than one bucket");
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t p = 0; p < sizes.size(); ++p) {
      for (std::size_t i = 0; i < sizes[p]; ++i) pinned[p][i] = static_cast<float>(step * 100 + p) + i % 7;
    }
    // Backward fills the gradients on the default stream, last parameter first.
    for (std::size_t p = sizes.size(); p-- > 0;) {
      cudaMemcpyAsync(device[p], pinned[p], sizes[p] * sizeof(float), cudaMemcpyHostToDevice,
                      cudaStreamLegacy);
      reducer.mark_ready(p);
    }
    reducer.finalize();
    bool same = true;
    for (std::size_t p = 0; p < sizes.size(); ++p) {
      const auto back = host_copy(device[p], sizes[p]);
      same = same && std::equal(back.begin(), back.end(), pinned[p]);
    }
    expect(same, "step " + std::to_string(step) + ": every device gradient holds the average (world of one)");
  }
  // An out-of-place collective after an async copy on the default stream reads the copied data.
  float* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), sizes[3] * sizeof(float));
  for (std::size_t i = 0; i < sizes[3]; ++i) pinned[3][i] = static_cast<float>(i % 1009);
  cudaMemcpyAsync(device[3], pinned[3], sizes[3] * sizeof(float), cudaMemcpyHostToDevice, cudaStreamLegacy);
  pg.all_gather(device[3], out, sizes[3], ddp::DataType::kFloat32);
  const auto gathered = host_copy(out, sizes[3]);
  expect(std::equal(gathered.begin(), gathered.end(), pinned[3]),
         "all_gather after an async copy on the default stream gathers the copied data");
  cudaFree(out);
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    cudaFree(device[p]);
    cudaFreeHost(pinned[p]);
  }
  return g_failures ? 1 : 0;
}

// An NCCL error on an operation aborts the communicator: the failing call
// names the op, the rank and NCCL's reason; every later call fails with that
// first error instead of touching the aborted communicator; destruction
// returns promptly. NCCL_CHECK_POINTERS=1 makes NCCL refuse a host pointer
// synchronously (ncclInvalidArgument) instead of faulting on the device.
int abort_on_error() {
  setenv("NCCL_CHECK_POINTERS", "1", 1);
  const auto start = Clock::now();
  {
    auto store = std::make_shared<ddp::store::MemoryStore>();
    ddp::ProcessGroup pg(store, "t/", 0, 1, nccl_options(std::chrono::seconds(10)));
    std::vector<float> host(1024, 1.0f);
    try {
      pg.all_reduce(host.data(), host.size(), ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
      expect(false, "all_reduce of a host pointer must fail");
    } catch (const std::exception& e) {
      std::printf("message: %s\n", e.what());
      expect(contains(e.what(), "all_reduce failed on rank 0 of 1"), "the failing op names the op and rank");
    }
    float* d = device_copy(host);
    try {
      pg.all_reduce(d, host.size(), ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
      expect(false, "an op after the abort must fail");
    } catch (const std::exception& e) {
      std::printf("message: %s\n", e.what());
      expect(
          contains(e.what(), "aborted after an earlier failure") && contains(e.what(), "all_reduce failed"),
          "a later op fails with the first error");
    }
    cudaFree(d);
  }
  expect(Clock::now() - start < std::chrono::seconds(15), "the aborted group is destroyed promptly");
  unsetenv("NCCL_CHECK_POINTERS");
  return g_failures ? 1 : 0;
}

// ElasticGroup over NCCL on one device: check() sees the generation move,
// reform() aborts the communicator (ncclCommAbort) with an op still queued
// and builds a new one in place; a Reducer built on group() keeps working.
int elastic_reform() {
  setenv("DDP_REFORM", "1", 1);
  ddp::Context ctx;
  ctx.store = std::make_shared<ddp::store::MemoryStore>();
  ctx.store_prefix = "t/";
  ddp::ElasticGroup eg(ctx, nccl_options(std::chrono::seconds(30)));
  expect(eg.enabled() && eg.group().backend() == "nccl", "an enabled ElasticGroup over nccl");
  std::vector<float> host(1 << 20, 2.0f);
  float* d = device_copy(host);
  ddp::Reducer reducer(eg.group(), {std::span<float>(d, host.size())});
  for (int round = 1; round <= 5; ++round) {
    reducer.finalize();
    auto pending = eg.group().all_reduce_async(d, host.size(), ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
    ctx.store->add(ddp::store::keys::reform_generation_key(ddp::store::keys::reform_prefix(ctx.store_prefix)),
                   1);
    bool threw = false;
    try {
      eg.check();
    } catch (const ddp::MembershipChanged& e) {
      threw = e.generation() == round - 1;
    }
    expect(threw, "check() throws MembershipChanged naming the generation left");
    const auto t0 = Clock::now();
    const auto info = eg.reform();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    std::printf("reform %d: %lld ms (group ready after %lld us)\n", round, static_cast<long long>(ms),
                static_cast<long long>(info.took.count()));
    try {
      pending.wait(std::chrono::seconds(10));
    } catch (const std::exception&) {
      // aborted or done: either way it ended
    }
    expect(pending.is_completed(), "the op queued before reform() has ended");
    expect(info.generation == round && info.rank == 0 && info.world_size == 1, "re-formed as rank 0 of 1");
  }
  eg.group().all_reduce(d, host.size(), ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
  reducer.finalize();
  expect(host_copy(d, 1)[0] > 0.0f, "collectives work after the last re-form");
  cudaFree(d);
  unsetenv("DDP_REFORM");
  return g_failures ? 1 : 0;
}

// Single-rank SDK all-reduce against raw NCCL on the same device (a figure, not an assert).
int bench() {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  ddp::ProcessGroup pg(store, "t/", 0, 1, nccl_options());
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm;
  ncclCommInitRank(&comm, 1, id, 0);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  int nccl_version = 0, driver = 0, runtime = 0;
  ncclGetVersion(&nccl_version);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s; CUDA driver API %d, runtime %d; NCCL %d\n", prop.name, driver, runtime,
              nccl_version);
  // One rank: NCCL's in-place all-reduce moves no data, so its columns are
  // the fixed cost of a call; the out-of-place all-gather is a device copy.
  std::printf("%12s %8s %10s %10s %9s %10s %10s %9s\n", "bytes", "iters", "ar raw us", "ar sdk us",
              "overhead", "ag raw us", "ag sdk us", "overhead");
  auto time_us = [](int iters, auto&& body) {
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) body();
      best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
    }
    return best;
  };
  for (std::size_t bytes = 4096; bytes <= (std::size_t{1} << 30); bytes *= 4) {
    const std::size_t n = bytes / 4;
    float* d = nullptr;
    float* out = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&d), bytes);
    cudaMalloc(reinterpret_cast<void**>(&out), bytes);
    const int iters = bytes < (1u << 20) ? 2000 : bytes < (64u << 20) ? 200 : 20;
    const double ar_raw = time_us(iters, [&] {
      ncclAllReduce(d, d, n, ncclFloat32, ncclSum, comm, stream);
      cudaStreamSynchronize(stream);
    });
    const double ar_sdk =
        time_us(iters, [&] { pg.all_reduce(d, n, ddp::DataType::kFloat32, ddp::ReduceOp::kSum); });
    const double ag_raw = time_us(iters, [&] {
      ncclAllGather(d, out, n, ncclFloat32, comm, stream);
      cudaStreamSynchronize(stream);
    });
    const double ag_sdk = time_us(iters, [&] { pg.all_gather(d, out, n, ddp::DataType::kFloat32); });
    std::printf("%12zu %8d %10.2f %10.2f %+8.1f%% %10.2f %10.2f %+8.1f%%\n", bytes, iters, ar_raw, ar_sdk,
                (ar_sdk - ar_raw) / ar_raw * 100, ag_raw, ag_sdk, (ag_sdk - ag_raw) / ag_raw * 100);
    cudaFree(d);
    cudaFree(out);
  }
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device visible\n");
    return 77;
  }
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "world-of-one") return world_of_one();
    if (mode == "init-timeout") return init_timeout();
    if (mode == "duplicate-gpu") return duplicate_gpu();
    if (mode == "id-never-published") return id_never_published();
    if (mode == "scalable-ids") return scalable_ids();
    if (mode == "abort-on-error") return abort_on_error();
    if (mode == "reducer") return reducer();
    if (mode == "elastic-reform") return elastic_reform();
    if (mode == "bench") return bench();
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: ddp_gpu_nccl_test "
               "world-of-one|init-timeout|duplicate-gpu|id-never-published|scalable-ids|reducer|abort-on-"
               "error|elastic-reform|bench\n");
  return 2;
}
