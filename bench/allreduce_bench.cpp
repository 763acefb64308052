// ddp-bench allreduce: algorithm and bus bandwidth of the SDK's all-reduce
// against raw Gloo (same algorithm: gloo::allreduce, bcube up to 1 MiB and
// ring above, as the SDK chooses; same TCP transport on 127.0.0.1) measured in the same rank processes, 4 KiB
// to 64 MiB; and
// `--overlap`: ddp-example-train's step time with the Reducer overlapping
// backward against all-reduce after backward.
//
// The bench spawns its own ranks: it hosts a StoreServer, re-runs itself with
// `allreduce --rank-worker` under hand-set env (RANK, WORLD_SIZE,
// DDP_STORE_ENDPOINT), and rank 0 prints the table.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/sdk.hpp"
#include "ddp/store/store.hpp"
#include "ddp/store/store_server.hpp"

#if DDP_BENCH_HAVE_GLOO
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

extern char** environ;

namespace ddp::bench {
namespace {

using Seconds = std::chrono::duration<double>;

// Spawns `argv` with the current env plus `extra`; returns the pid.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (!extra.count(kv.substr(0, kv.find('=')))) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : extra) env_strings.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0].c_str(), nullptr, nullptr, args.data(), envp.data()) != 0) {
    throw std::runtime_error("cannot start " + argv[0]);
  }
  return pid;
}

// Runs `world` copies of argv as ranks against a fresh in-process store; false if any failed.
bool run_ranks(const std::vector<std::string>& argv, int world) {
  store::StoreServerOptions options;
  options.host = "127.0.0.1";
  store::StoreServer server(options);
  server.start();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pids.push_back(spawn(argv, {{"RANK", std::to_string(r)},
                                {"WORLD_SIZE", std::to_string(world)},
                                {"LOCAL_RANK", std::to_string(r)},
                                {"LOCAL_WORLD_SIZE", std::to_string(world)},
                                {"DDP_STORE_ENDPOINT", "127.0.0.1:" + std::to_string(server.port())},
                                {"DDP_STORE_PREFIX", "bench/"}}));
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

#if DDP_BENCH_HAVE_GLOO
// Raw Gloo gets its rendezvous through the same store, but the timed loop is
// pure Gloo: gloo::allreduce on a context of its own.
class RawStore : public gloo::rendezvous::Store {
 public:
  RawStore(std::shared_ptr<store::Store> s, std::string prefix)
      : s_(std::move(s)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(prefix_ + key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    const auto v = s_->get(prefix_ + key, std::chrono::seconds(60));
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::seconds(60)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> k;
    for (const auto& key : keys) k.push_back(prefix_ + key);
    s_->wait(k, timeout);
  }

 private:
  std::shared_ptr<store::Store> s_;
  std::string prefix_;
};
#endif

int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 3, 50));
}

// raw_ring: raw Gloo always takes the ring (Gloo's default) instead of the SDK's choice.
int rank_worker(std::size_t min_bytes, std::size_t max_bytes, int rounds, bool raw_ring) {
#if DDP_BENCH_HAVE_GLOO
  Context ctx = init();
  ProcessGroupOptions options;
  options.backend = "gloo";
  ProcessGroup pg(ctx, options);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto raw = std::make_shared<gloo::rendezvous::Context>(ctx.rank, ctx.world_size);
  RawStore raw_store(ctx.store, ctx.store_prefix + "raw/");
  raw->connectFullMesh(raw_store, device);
  std::uint32_t tag = 0;
  const int n = ctx.world_size;
  if (ctx.rank == 0) {
    std::printf("allreduce: %d ranks, float32 sum, gloo over TCP on 127.0.0.1, best of %d rounds%s\n", n,
                rounds, raw_ring ? "; raw: always the ring" : "");
    std::printf("%10s %6s | %9s %9s | %9s %9s | %8s\n", "bytes", "iters", "raw algbw", "raw busbw",
                "sdk algbw", "sdk busbw", "overhead");
    std::printf("%10s %6s | %9s %9s | %9s %9s | %8s\n", "", "", "GB/s", "GB/s", "GB/s", "GB/s", "%");
  }
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    const int iters = iterations_for(bytes);
    double best_raw = 1e30, best_sdk = 1e30;
    auto time_raw = [&] {
      gloo::BarrierOptions b(raw);
      b.setTag(tag++);
      gloo::barrier(b);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        gloo::AllreduceOptions o(raw);
        o.setOutput(buf.data(), buf.size());
        o.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        o.setTag(tag++);
        // The SDK's choice (worker_sdk/src/gloo/gloo_backend.cpp, kBcubeMaxBytes).
        if (!raw_ring && bytes <= (std::size_t{1} << 20))
          o.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        gloo::allreduce(o);
      }
      best_raw = std::min(best_raw, Seconds(std::chrono::steady_clock::now() - t0).count() / iters);
    };
    auto time_sdk = [&] {
      pg.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) pg.all_reduce(buf, ReduceOp::kSum);
      best_sdk = std::min(best_sdk, Seconds(std::chrono::steady_clock::now() - t0).count() / iters);
    };
    // Alternate which goes first, so neither always gets the warmer caches or
    // the quieter moment; the best block of each counts (the machine is shared).
    for (int round = 0; round < rounds; ++round) {
      if (round % 2 == 0) {
        time_raw();
        time_sdk();
      } else {
        time_sdk();
        time_raw();
      }
    }
    if (ctx.rank == 0) {
      const double bus = 2.0 * (n - 1) / n;
      const double raw_alg = static_cast<double>(bytes) / best_raw / 1e9;
      const double sdk_alg = static_cast<double>(bytes) / best_sdk / 1e9;
      std::printf("%10zu %6d | %9.3f %9.3f | %9.3f %9.3f | %+7.1f\n", bytes, iters, raw_alg, raw_alg * bus,
                  sdk_alg, sdk_alg * bus, (best_sdk - best_raw) / best_raw * 100.0);
      std::fflush(stdout);
    }
  }
  pg.barrier();
  return 0;
#else
  (void)min_bytes;
  (void)max_bytes;
  (void)rounds;
  (void)raw_ring;
  std::fprintf(stderr, "ddp-bench allreduce: built without Gloo\n");
  return 1;
#endif
}

// Average step_ms over the epochs after the first (warm-up) from rank 0's output.
double step_ms(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  std::vector<double> steps;
  while (std::getline(in, line)) {
    const auto pos = line.find("step_ms ");
    if (pos != std::string::npos) steps.push_back(std::stod(line.substr(pos + 8)));
  }
  if (steps.size() > 1) steps.erase(steps.begin());
  double sum = 0;
  for (double s : steps) sum += s;
  return steps.empty() ? 0.0 : sum / static_cast<double>(steps.size());
}

int overlap(const std::vector<int>& worlds, int hidden, int repeats) {
  const auto example = (std::filesystem::path(self_exe()).parent_path() / "ddp-example-train").string();
  const auto dir = std::filesystem::temp_directory_path();
  std::printf(
      "overlap: ddp-example-train --hidden %d, buckets: first 4 KiB, then 256 KiB (3 buckets), best of %d "
      "runs\n",
      hidden, repeats);
  std::printf("%6s | %14s %14s | %6s\n", "ranks", "after backward", "overlapped", "gain");
  std::printf("%6s | %14s %14s | %6s\n", "", "step ms", "step ms", "%");
  for (int world : worlds) {
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < repeats; ++rep) {
      for (int mode = 0; mode < 2; ++mode) {
        const auto out = dir / ("ddp-bench-overlap-" + std::to_string(getpid()) + ".txt");
        std::vector<std::string> argv{
            "/bin/sh",
            "-c",
            "if [ \"$RANK\" = 0 ]; then exec \"$0\" \"$@\" > '" + out.string() +
                "'; else exec \"$0\" \"$@\" > /dev/null; fi",
            example,
            "--epochs",
            "4",
            "--hidden",
            std::to_string(hidden),
            "--dataset-size",
            "4096",
            "--batch-size",
            "64",
            "--first-bucket-cap-kb",
            "4",
            "--bucket-cap-kb",
            "256",
            "--checkpoint",
            (dir / ("ddp-bench-overlap-" + std::to_string(getpid()) + ".ckpt")).string()};
        if (mode == 0) argv.push_back("--no-overlap");
        if (!run_ranks(argv, world)) throw std::runtime_error("ddp-example-train failed");
        std::ifstream in(out);
        std::stringstream ss;
        ss << in.rdbuf();
        best[mode] = std::min(best[mode], step_ms(ss.str()));
        std::filesystem::remove(out);
      }
    }
    std::printf("%6d | %14.3f %14.3f | %+5.1f\n", world, best[0], best[1],
                (best[0] - best[1]) / best[0] * 100.0);
    std::fflush(stdout);
  }
  return 0;
}

std::vector<int> parse_worlds(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

int allreduce_main(int argc, char** argv) {
  CLI::App app{"SDK all-reduce vs raw Gloo (algbw, busbw, overhead); --overlap: Reducer overlap gain"};
  std::string ranks = "2,4";
  std::size_t min_bytes = 4096, max_bytes = 64u << 20;
  int rounds = 10, hidden = 256, repeats = 3;
  bool rank_mode = false, overlap_mode = false, raw_ring = false;
  app.add_option("--ranks", ranks, "comma-separated world sizes");
  app.add_option("--min-bytes", min_bytes, "smallest message (sizes grow x4)");
  app.add_option("--max-bytes", max_bytes, "largest message");
  app.add_option("--rounds", rounds, "timed rounds per size; the best counts")->check(CLI::Range(1, 100));
  app.add_flag("--raw-ring", raw_ring,
               "raw Gloo always takes its ring (default: the SDK's choice, bcube up to 1 MiB)");
  app.add_flag("--overlap", overlap_mode, "measure the Reducer's overlap with ddp-example-train instead");
  app.add_option("--hidden", hidden, "--overlap: hidden width of the example's MLP");
  app.add_option("--repeats", repeats, "--overlap: runs per mode; the best counts");
  app.add_flag("--rank-worker", rank_mode, "internal: run as one rank (env from the parent)")->group("");
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  if (min_bytes < 4 || max_bytes < min_bytes) {
    std::fprintf(stderr, "ddp-bench allreduce: need 4 <= --min-bytes <= --max-bytes\n");
    return 2;
  }
  if (rank_mode) return rank_worker(min_bytes, max_bytes, rounds, raw_ring);
  const auto worlds = parse_worlds(ranks);
  if (overlap_mode) return overlap(worlds, hidden, repeats);
  for (int world : worlds) {
    std::vector<std::string> child{self_exe(),
                                   "allreduce",
                                   "--rank-worker",
                                   "--min-bytes",
                                   std::to_string(min_bytes),
                                   "--max-bytes",
                                   std::to_string(max_bytes),
                                   "--rounds",
                                   std::to_string(rounds)};
    if (raw_ring) child.push_back("--raw-ring");
    if (!run_ranks(child, world)) {
      std::fprintf(stderr, "ddp-bench allreduce: a rank failed (world size %d)\n", world);
      return 1;
    }
    std::printf("\n");
  }
  return 0;
}

DDP_BENCH_SUBCOMMAND("allreduce",
                     "SDK all-reduce vs raw Gloo, 4 KiB..64 MiB; --overlap: Reducer overlap gain",
                     allreduce_main);

}  // namespace
}  // namespace ddp::bench
